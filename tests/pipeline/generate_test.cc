// Text-to-image on tests/models/tiny-sd against the PyTorch pipeline
// (tools/make_tiny_sd.py): every reference case (each scheduler, a negative
// prompt, 20 steps, image to image, tiled VAE decoding) in every mode, step
// by step; and the promise that a seed gives the same image bit for bit.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "npy/npy.h"
#include "pipeline/pipeline.h"

namespace kiln::testing {
namespace {

namespace fs = std::filesystem;
const fs::path kTinySd = fs::path(KILN_SOURCE_DIR) / "tests" / "models" / "tiny-sd";

struct ModeCase {
  const char* name;
  ExecutionMode mode;
  bool whole_loop;
};
const ModeCase kModes[] = {{"eager", ExecutionMode::kEager, false},
                           {"graph", ExecutionMode::kGraph, false},
                           {"graph_loop", ExecutionMode::kGraph, true}};

std::unique_ptr<Pipeline> load(const ModeCase& m) {
  auto pipe = Pipeline::load(kTinySd.string(), {.mode = m.mode, .whole_loop = m.whole_loop});
  EXPECT_TRUE(pipe.ok()) << pipe.status().message();
  return pipe.ok() ? std::move(pipe).value() : nullptr;
}

// The case's options; an image-to-image case's picture is read into `init`.
GenerateOptions case_options(const fs::path& folder, std::optional<RgbImage>& init) {
  std::ifstream in(folder / "case.json");
  const nlohmann::json c = nlohmann::json::parse(in);
  GenerateOptions o{.prompt = c["prompt"], .negative_prompt = c["negative_prompt"], .steps = c["steps"],
                    .guidance_scale = c["guidance_scale"], .seed = c["seed"], .width = c["width"],
                    .height = c["height"], .scheduler = c["scheduler"], .keep_trajectory = true};
  if (c.contains("init_image")) {
    auto image = read_png((folder / c["init_image"].get<std::string>()).string(), 4096);
    EXPECT_TRUE(image.ok()) << image.status().message();
    if (image.ok()) init = std::move(*image);
    o.init_image = init ? &*init : nullptr;
    o.strength = c["strength"];
  }
  if (c.contains("vae_tiling")) o.vae_tiling = c["vae_tiling"].get<bool>();
  return o;
}

class TinySd : public ::testing::TestWithParam<ModeCase> {};

TEST_P(TinySd, MatchesThePyTorchPipelineStepByStep) {
  auto pipe = load(GetParam());
  ASSERT_TRUE(pipe);
  std::vector<fs::path> cases;
  for (const auto& e : fs::directory_iterator(kTinySd / "reference")) cases.push_back(e.path());
  std::sort(cases.begin(), cases.end());
  ASSERT_GE(cases.size(), 11u);
  for (const fs::path& folder : cases) {
    SCOPED_TRACE(folder.filename().string());
    std::optional<RgbImage> init;
    const GenerateOptions o = case_options(folder, init);
    auto g = pipe->generate(o);
    ASSERT_TRUE(g.ok()) << g.status().message();
    auto trajectory = npy_read((folder / "trajectory.npy").string());
    auto pixels = npy_read((folder / "pixels.npy").string());
    ASSERT_TRUE(trajectory.ok() && pixels.ok());
    const int steps = int(g->trajectory.size());  // fewer for image to image
    EXPECT_EQ(g->steps_run, steps);
    const int64_t n = g->latents.numel();
    ASSERT_EQ(trajectory->numel(), n * steps);
    double worst = 0;
    for (int s = 0; s < steps; ++s)
      for (int64_t j = 0; j < n; ++j)
        worst = std::max(worst, double(std::abs(g->trajectory[size_t(s)].data<float>()[j] -
                                                trajectory->data<float>()[s * n + j])));
    EXPECT_LE(worst, 1e-3) << "max abs latent error over the trajectory";
    ASSERT_EQ(pixels->numel(), int64_t(g->pixels.size()));
    int worst_pixel = 0;
    for (size_t j = 0; j < g->pixels.size(); ++j)
      worst_pixel = std::max(worst_pixel, std::abs(int(g->pixels[j]) - int(pixels->data<uint8_t>()[j])));
    EXPECT_LE(worst_pixel, 1) << "max abs pixel difference";
    std::printf("  %s: max abs latent error %.2e, max pixel difference %d\n", folder.filename().c_str(), worst,
                worst_pixel);
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, TinySd, ::testing::ValuesIn(kModes),
                         [](const auto& info) { return std::string(info.param.name); });

// One seed, one image: bit for bit across runs of a mode, and across the
// host loop and the compiled loop (which run the same kernels in the same
// order); eager's unfused kernels round differently, by at most 1 in a byte.
TEST(Generate, SameSeedSameBits) {
  GenerateOptions o{.prompt = "a cat", .steps = 5, .seed = 42, .width = 64, .height = 64, .scheduler = "euler_a"};
  auto eager = load(kModes[0]);
  auto graph = load(kModes[1]);
  auto loop = load(kModes[2]);
  ASSERT_TRUE(eager && graph && loop);
  auto a = graph->generate(o), b = graph->generate(o), c = loop->generate(o), d = loop->generate(o);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok() && d.ok());
  EXPECT_EQ(a->pixels, b->pixels);
  EXPECT_EQ(c->pixels, d->pixels);
  EXPECT_EQ(a->pixels, c->pixels);
  EXPECT_EQ(0, std::memcmp(a->latents.raw(), c->latents.raw(), a->latents.nbytes()));
  auto unfused = eager->generate(o);
  ASSERT_TRUE(unfused.ok());
  for (size_t i = 0; i < a->pixels.size(); ++i) ASSERT_LE(std::abs(int(unfused->pixels[i]) - int(a->pixels[i])), 1) << i;
  o.seed = 43;
  auto e = loop->generate(o);
  ASSERT_TRUE(e.ok());
  EXPECT_NE(c->pixels, e->pixels) << "another seed, another image";
}

TEST(Generate, RejectsBadOptions) {
  auto pipe = load(kModes[1]);
  ASSERT_TRUE(pipe);
  for (GenerateOptions o : {GenerateOptions{.prompt = "a", .steps = 0}, GenerateOptions{.prompt = "a", .width = 60},
                            GenerateOptions{.prompt = "a", .batch = 0},
                            GenerateOptions{.prompt = "a", .scheduler = "pndm"}}) {
    auto g = pipe->generate(o);
    EXPECT_FALSE(g.ok());
    if (!g.ok()) {
      EXPECT_NE(g.status().code(), StatusCode::kInternal) << g.status().message();
    }
  }
}

TEST(Generate, RejectsBadImageToImageOptions) {
  auto pipe = load(kModes[1]);
  ASSERT_TRUE(pipe);
  const RgbImage odd{60, 48, std::vector<uint8_t>(60 * 48 * 3, 128)}, fine{64, 48, std::vector<uint8_t>(64 * 48 * 3, 128)};
  for (GenerateOptions o : {GenerateOptions{.prompt = "a", .init_image = &odd},
                            GenerateOptions{.prompt = "a", .width = 64, .height = 64, .init_image = &fine},
                            GenerateOptions{.prompt = "a", .init_image = &fine, .strength = 0.0f},
                            GenerateOptions{.prompt = "a", .init_image = &fine, .strength = 1.5f},
                            GenerateOptions{.prompt = "a", .steps = 4, .init_image = &fine, .strength = 0.2f}}) {
    auto g = pipe->generate(o);
    EXPECT_FALSE(g.ok());
    if (!g.ok()) {
      EXPECT_NE(g.status().code(), StatusCode::kInternal) << g.status().message();
    }
  }
}

TEST(Generate, NamesWhatIsMissingFromAFolder) {
  const fs::path dir = fs::temp_directory_path() / "kiln_generate_test_folder";
  fs::remove_all(dir);
  fs::copy(kTinySd, dir, fs::copy_options::recursive);
  fs::remove(dir / "vae_decoder" / "model.onnx");
  auto pipe = Pipeline::load(dir.string(), {});
  ASSERT_FALSE(pipe.ok());
  EXPECT_NE(pipe.status().message().find("vae_decoder/model.onnx"), std::string::npos) << pipe.status().message();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiln::testing
