// Text-to-image on tests/models/tiny-sd against the PyTorch pipeline
// (tools/make_tiny_sd.py): every reference case (each scheduler, a negative
// prompt, 20 steps, image to image, tiled VAE decoding) in every mode, step
// by step; the same for kiln's default model (models/shapes, its references
// written by tools/train_default_model.py); and the promise that a seed
// gives the same image bit for bit.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "reference_cases.h"

namespace kiln::testing {
namespace {

namespace fs = std::filesystem;
const fs::path kTinySd = fs::path(KILN_SOURCE_DIR) / "tests" / "models" / "tiny-sd";
const fs::path kDefaultModel = fs::path(KILN_SOURCE_DIR) / "models" / "shapes";
const fs::path kDefaultModelReference = fs::path(KILN_SOURCE_DIR) / "tests" / "data" / "default-model-reference";

std::unique_ptr<Pipeline> load(const ModeCase& m, const fs::path& model = kTinySd) {
  return load_pipeline(m, model);
}

class TinySd : public ::testing::TestWithParam<ModeCase> {};

TEST_P(TinySd, MatchesThePyTorchPipelineStepByStep) {
  expect_matches_reference(kTinySd, kTinySd / "reference", 16, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Modes, TinySd, ::testing::ValuesIn(kModes),
                         [](const auto& info) { return std::string(info.param.name); });

class DefaultModel : public ::testing::TestWithParam<ModeCase> {};

TEST_P(DefaultModel, MatchesThePyTorchPipelineStepByStep) {
  expect_matches_reference(kDefaultModel, kDefaultModelReference, 2, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Modes, DefaultModel, ::testing::ValuesIn(kModes),
                         [](const auto& info) { return std::string(info.param.name); });

// --precision bf16: after a full 20-step loop the latents keep a cosine
// similarity of at least 0.999 with f32's, in every mode, on two prompts and
// schedulers; and bf16 did change them (its products ran).
class TinySdBf16 : public ::testing::TestWithParam<ModeCase> {};

TEST_P(TinySdBf16, TwentyStepsStayWithinCosine0999OfF32) {
  const ModeCase& m = GetParam();
  auto f32 = load(m);
  auto policy = precision_policy("bf16", "");
  ASSERT_TRUE(policy.ok());
  auto bf16 = Pipeline::load(kTinySd.string(), {.mode = m.mode, .whole_loop = m.whole_loop,
                                                .passes = {.precision = *policy}});
  ASSERT_TRUE(f32 && bf16.ok()) << bf16.status().message();
  for (const auto& [prompt, scheduler] : {std::pair{"a cat", "euler"}, {"a red house by the sea", "dpmpp_2m"}}) {
    SCOPED_TRACE(scheduler);
    const GenerateOptions o{.prompt = prompt, .steps = 20, .seed = 7, .width = 64, .height = 64,
                            .scheduler = scheduler};
    auto a = f32->generate(o), b = (*bf16)->generate(o);
    ASSERT_TRUE(a.ok() && b.ok());
    const float *x = a->latents.data<float>(), *y = b->latents.data<float>();
    double dot = 0, xx = 0, yy = 0, diff = 0;
    for (int64_t i = 0; i < a->latents.numel(); ++i) {
      dot += double(x[i]) * y[i], xx += double(x[i]) * x[i], yy += double(y[i]) * y[i];
      diff = std::max(diff, double(std::abs(x[i] - y[i])));
    }
    const double cosine = dot / std::sqrt(xx * yy);
    std::printf("  %s %s: cosine %.7f, max abs latent difference %.2e\n", m.name, scheduler, cosine, diff);
    EXPECT_GE(cosine, 0.999);
    EXPECT_GT(diff, 1e-5) << "bf16 gave f32's latents: did its products run in bf16?";
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, TinySdBf16, ::testing::ValuesIn(kModes),
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
