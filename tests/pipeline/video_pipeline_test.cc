// Text to video and image to video with the tiny Wan2.2 pipeline
// (tests/models/wan-tiny) against PyTorch's whole generation
// (tools/wan/pipeline.py, 4 UniPC steps): the final latents within 1e-3 and
// the decoded frames within 1e-3, in each mode (host loop eager and over a
// plan, the whole loop as one plan) and from both folder layouts; the same
// seed gives the same frames.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "npy/npy.h"
#include "pipeline/png.h"
#include "pipeline/video_pipeline.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

const fs::path kTiny = fs::path(KILN_SOURCE_DIR) / "tests" / "models" / "wan-tiny";

double max_relative_error(const float* got, const Tensor& want) {
  double max_ref = 0, max_err = 0;
  for (int64_t k = 0; k < want.numel(); ++k) {
    const double e = want.data<float>()[k], g = got[k];
    max_ref = std::max(max_ref, std::abs(e));
    max_err = std::max(max_err, std::isnan(g) ? INFINITY : std::abs(e - g));
  }
  return max_err / max_ref;
}

struct Case {
  const char* name;
  const char* reference;  // reference/<it>
  const char* folder;
  ExecutionMode mode;
  bool whole_loop;
};

class WanVideo : public ::testing::TestWithParam<Case> {};

TEST_P(WanVideo, MatchesPyTorch) {
  const Case& c = GetParam();
  const fs::path dir = kTiny / "reference" / c.reference;
  std::ifstream in(dir / "case.json");
  const nlohmann::json spec = nlohmann::json::parse(in);
  auto pipe = VideoPipeline::load((kTiny / c.folder).string(), {.mode = c.mode, .whole_loop = c.whole_loop});
  ASSERT_TRUE(pipe.ok()) << pipe.status().message();
  std::optional<RgbImage> image;
  if (spec.contains("image")) {
    auto png = read_png((dir / spec["image"].get<std::string>()).string(), 4096);
    ASSERT_TRUE(png.ok()) << png.status().message();
    image = std::move(*png);
  }
  const VideoRequest request{.prompt = spec["prompt"],
                             .negative_prompt = spec["negative_prompt"],
                             .seed = spec["seed"],
                             .steps = spec["steps"],
                             .guidance_scale = spec["guidance_scale"],
                             .frames = spec["frames"],
                             .width = spec["width"],
                             .height = spec["height"],
                             .first_frame = image ? &*image : nullptr};
  const Tensor expected_video = *npy_read((dir / "video.npy").string());
  Tensor video = *Tensor::empty(DType::kF32, expected_video.shape());
  const int64_t frames = video.shape()[2], plane = video.shape()[3] * video.shape()[4];
  int64_t written = 0;
  auto g = (*pipe)->generate(request, [&](const TensorView& chunk) {
    const int64_t t = chunk.shape[2];
    if (written + t > frames) return internal_error("too many frames");
    for (int64_t ch = 0; ch < 3; ++ch)
      std::memcpy(video.data<float>() + (ch * frames + written) * plane, chunk.as<float>() + ch * t * plane,
                  size_t(t * plane) * sizeof(float));
    written += t;
    return ok_status();
  });
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->scheduler, "unipc");
  EXPECT_EQ(written, frames);
  const Tensor latents = *npy_read((dir / "latents.npy").string());
  const double latent_error = max_relative_error(g->latents.data<float>(), latents);
  const double video_error = max_relative_error(video.data<float>(), expected_video);
  fmt::print("  {}: latents max |err| / max |ref| {:.2e}, frames {:.2e}\n", c.name, latent_error, video_error);
  EXPECT_LE(latent_error, 1e-3);
  EXPECT_LE(video_error, 1e-3);
}

const Case kCases[] = {
    {"t2v_graph_loop", "video_t2v", "diffusers", ExecutionMode::kGraph, true},
    {"t2v_graph", "video_t2v", "diffusers", ExecutionMode::kGraph, false},
    {"t2v_eager", "video_t2v", "original", ExecutionMode::kEager, false},
    {"i2v_graph_loop", "video_i2v", "diffusers", ExecutionMode::kGraph, true},
    {"i2v_graph_original", "video_i2v", "original", ExecutionMode::kGraph, false},
};
INSTANTIATE_TEST_SUITE_P(Modes, WanVideo, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

// A pipeline keeps the text encoder's rows for the texts it has encoded: a
// repeat runs no text encoder and gives the same latents, and a new prompt
// with the same negative prompt encodes only the new one.
TEST(WanVideoRequests, RepeatedTextsComeFromTheTextCache) {
  auto pipe = VideoPipeline::load((kTiny / "diffusers").string(), {});
  ASSERT_TRUE(pipe.ok()) << pipe.status().message();
  auto generate = [&](const std::string& prompt) {
    auto g = (*pipe)->generate({.prompt = prompt, .negative_prompt = "blurry", .seed = 3, .steps = 2, .frames = 5,
                                .width = 64, .height = 32},
                               [](const TensorView&) { return ok_status(); });
    EXPECT_TRUE(g.ok()) << g.status().message();
    return std::move(*g);
  };
  const VideoGeneration first = generate("a red fox"), again = generate("a red fox"), other = generate("a grey owl");
  EXPECT_EQ(first.texts_encoded, 2);
  EXPECT_EQ(again.texts_encoded, 0);
  EXPECT_EQ(other.texts_encoded, 1);
  ASSERT_EQ(first.latents.nbytes(), again.latents.nbytes());
  EXPECT_EQ(std::memcmp(first.latents.raw(), again.latents.raw(), first.latents.nbytes()), 0);
  EXPECT_NE(std::memcmp(first.latents.raw(), other.latents.raw(), first.latents.nbytes()), 0);
}

// Guidance 1 or below runs the transformer once a step on the prompt alone:
// guidance 0 and 1 give the same latents (the negative prompt unread, not
// encoded), in the host loop and the whole-loop plan alike, and they are
// what classifier-free guidance converges to as its scale nears 1.
TEST(WanVideoRequests, GuidanceOffRunsThePromptAlone) {
  auto generate = [&](bool whole_loop, float guidance) {
    auto pipe = VideoPipeline::load((kTiny / "diffusers").string(), {.whole_loop = whole_loop});
    EXPECT_TRUE(pipe.ok()) << pipe.status().message();
    auto g = (*pipe)->generate({.prompt = "a red fox", .negative_prompt = "blurry", .seed = 4, .steps = 3,
                                .guidance_scale = guidance, .frames = 5, .width = 64, .height = 32},
                               [](const TensorView&) { return ok_status(); });
    EXPECT_TRUE(g.ok()) << g.status().message();
    return std::move(*g);
  };
  const VideoGeneration off = generate(false, 1.0f), zero = generate(true, 0.0f), near = generate(true, 1.001f);
  EXPECT_EQ(off.texts_encoded, 1);
  EXPECT_EQ(near.texts_encoded, 2);
  EXPECT_LT(max_relative_error(zero.latents.data<float>(), off.latents), 1e-5);
  const double to_guided = max_relative_error(near.latents.data<float>(), off.latents);
  EXPECT_LT(to_guided, 1e-2);
  EXPECT_GT(to_guided, 0.0);
}

TEST(WanVideoRequests, BadSizesAndFramesAreRefused) {
  auto pipe = VideoPipeline::load((kTiny / "diffusers").string(), {});
  ASSERT_TRUE(pipe.ok()) << pipe.status().message();
  for (const auto& [frames, width, height, what] :
       {std::tuple{int64_t(8), int64_t(96), int64_t(64), "4k+1"},
        std::tuple{int64_t(9), int64_t(100), int64_t(64), "multiple of 32"},
        std::tuple{int64_t(9), int64_t(96), int64_t(0), "multiple of 32"}}) {
    auto g = (*pipe)->generate({.prompt = "a cat", .steps = 1, .frames = frames, .width = width, .height = height}, {});
    ASSERT_FALSE(g.ok());
    EXPECT_NE(g.status().message().find(what), std::string::npos) << g.status().message();
  }
  auto g = (*pipe)->generate(
      {.prompt = "a cat", .steps = 1, .frames = 5, .width = 64, .height = 64, .scheduler = "ddim"}, {});
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("flow model"), std::string::npos) << g.status().message();
}

}  // namespace
}  // namespace kiln
