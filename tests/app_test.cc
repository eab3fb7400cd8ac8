// app/generator.h: generation as a library. Prompt k draws with seed + k
// (its images are the ones it makes alone with that seed), each image
// carries what made it, a batch and a grid hold what they should, and bad
// requests are errors, not crashes.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "app/generator.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
const fs::path kTinySd = fs::path(KILN_SOURCE_DIR) / "tests" / "models" / "tiny-sd";

std::unique_ptr<Generator> open_tiny_sd() {
  auto g = Generator::open({.model = kTinySd.string(), .pipeline = {.whole_loop = true}});
  EXPECT_TRUE(g.ok()) << g.status().message();
  return g.ok() ? std::move(*g) : nullptr;
}

std::string text_of(const GeneratedImage& image, std::string_view key) {
  for (const auto& [k, v] : image.text)
    if (k == key) return v;
  return "";
}

TEST(Generator, PromptKDrawsWithSeedPlusK) {
  auto gen = open_tiny_sd();
  ASSERT_TRUE(gen);
  EXPECT_EQ(gen->model_name(), "tiny-sd");
  const GenerationRequest both{.prompts = {"a cat", "a dog"}, .seed = 10, .steps = 3, .width = 32, .height = 32,
                               .batch = 2};
  auto r = gen->generate(both);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->images.size(), 4u);
  ASSERT_EQ(r->generations.size(), 2u);
  EXPECT_EQ(r->seed, 10u);
  EXPECT_EQ(r->images[2].seed, 11u);
  EXPECT_EQ(r->images[3].prompt, "a dog");
  EXPECT_EQ(text_of(r->images[3], "seed"), "11");
  EXPECT_EQ(text_of(r->images[0], "size"), "32x32");
  EXPECT_NE(text_of(r->images[0], "parameters").find("Sampler: euler"), std::string::npos);
  EXPECT_NE(r->images[0].rgb, r->images[1].rgb) << "a batch's images differ";
  // "a dog" alone with seed 11 makes the same pictures.
  auto alone = gen->generate({.prompts = {"a dog"}, .seed = 11, .steps = 3, .width = 32, .height = 32, .batch = 2});
  ASSERT_TRUE(alone.ok()) << alone.status().message();
  EXPECT_EQ(alone->images[0].rgb, r->images[2].rgb);
  EXPECT_EQ(alone->images[1].rgb, r->images[3].rgb);

  const GeneratedImage grid = image_grid(r->images, 3, both.prompts);
  EXPECT_EQ(grid.width, 3 * 32 + 2 * 2);
  EXPECT_EQ(grid.height, 2 * 32 + 2);
  EXPECT_EQ(grid.rgb.size(), size_t(grid.width * grid.height * 3));
  EXPECT_TRUE(std::equal(r->images[1].rgb.begin(), r->images[1].rgb.begin() + 32 * 3,
                         grid.rgb.begin() + (32 + 2) * 3)) << "image 1 starts the first row's second cell";
  EXPECT_NE(text_of(grid, "grid").find("a cat | a dog"), std::string::npos);
}

TEST(Generator, BadRequestsAreErrors) {
  auto gen = open_tiny_sd();
  ASSERT_TRUE(gen);
  for (const GenerationRequest& r : {GenerationRequest{}, GenerationRequest{.prompts = {"a"}, .steps = 0},
                                     GenerationRequest{.prompts = {"a"}, .width = 33},
                                     GenerationRequest{.prompts = {"a"}, .batch = 65}}) {
    auto result = gen->generate(r);
    ASSERT_FALSE(result.ok());
    EXPECT_EQ(result.status().code(), StatusCode::kInvalidArgument) << result.status().message();
  }
  auto missing = Generator::open({.model = "/nonexistent/model"});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace kiln
