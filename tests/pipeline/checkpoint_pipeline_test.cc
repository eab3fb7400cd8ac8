// Text to image from the checkpoints users hold (tests/models/sd-checkpoints,
// written with their PyTorch pipeline references by
// tools/make_tiny_checkpoints.py): every reference case from the SD 1.x,
// SD 2.x and SDXL single files (and SDXL's and a full LCM UNet's folders) in
// every mode, step by step; the same weights as a
// single file, a diffusers folder (plain, sharded, .fp16) and an optimum
// ONNX export giving the same image; a single file's tokenizer found where
// kiln looks for it, or one line naming what is missing.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "reference_cases.h"

namespace kiln::testing {
namespace {

namespace fs = std::filesystem;
const fs::path kCheckpoints = fs::path(KILN_SOURCE_DIR) / "tests" / "models" / "sd-checkpoints";

class SingleFile : public ::testing::TestWithParam<ModeCase> {};

// Each model form and its reference cases (at least `cases`): SD 1.x and
// 2.x single files; SDXL's (two text encoders, the pooled text and the size
// conditioning, an empty negative prompt as zeros; guided and Turbo's
// unguided trailing steps) as a single file and a folder; a full LCM UNet
// (the LCM scheduler, the guidance embedded, no CFG batch).
struct ReferenceForm {
  const char* model;
  const char* family;  // reference/<family>/cases
  size_t cases;
};
constexpr ReferenceForm kForms[] = {{"sd1.safetensors", "sd1", 3},  {"sd2.safetensors", "sd2", 2},
                                    {"sdxl.safetensors", "sdxl", 4}, {"sdxl-diffusers", "sdxl", 4},
                                    {"lcm-diffusers", "lcm", 2}};

TEST_P(SingleFile, MatchesThePyTorchPipelineStepByStep) {
  for (const ReferenceForm& f : kForms) {
    SCOPED_TRACE(f.model);
    expect_matches_reference(kCheckpoints / f.model, kCheckpoints / "reference" / f.family / "cases", f.cases,
                             GetParam());
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, SingleFile, ::testing::ValuesIn(kModes),
                         [](const auto& info) { return std::string(info.param.name); });

// The family's scheduler and prediction for a single file, the folder's
// config for a folder: with no --scheduler given, the same image.
Generation generate(const fs::path& model, PipelineOptions options = {}) {
  options.whole_loop = true;
  auto pipe = Pipeline::load(model.string(), options);
  EXPECT_TRUE(pipe.ok()) << pipe.status().message();
  if (!pipe.ok()) return {};
  auto g = (*pipe)->generate({.prompt = "a red circle", .negative_prompt = "blue", .steps = 12, .seed = 5,
                              .width = 32, .height = 32});
  EXPECT_TRUE(g.ok()) << g.status().message();
  return g.ok() ? std::move(*g) : Generation{};
}

int max_pixel_difference(const Generation& a, const Generation& b) {
  EXPECT_EQ(a.pixels.size(), b.pixels.size());
  int worst = 0;
  for (size_t i = 0; i < std::min(a.pixels.size(), b.pixels.size()); ++i)
    worst = std::max(worst, std::abs(int(a.pixels[i]) - int(b.pixels[i])));
  return worst;
}

TEST(CheckpointForms, TheSameWeightsMakeTheSameImage) {
  // SD 1.x in f32: the single file and the sharded diffusers folder, byte for byte.
  const Generation single = generate(kCheckpoints / "sd1.safetensors");
  const Generation sharded = generate(kCheckpoints / "sd1-diffusers-sharded");
  ASSERT_FALSE(single.pixels.empty());
  EXPECT_EQ(single.scheduler, "euler");  // PNDM, substituted, over the family's config in both
  EXPECT_EQ(single.pixels, sharded.pixels);
  EXPECT_EQ(0, std::memcmp(single.latents.raw(), sharded.latents.raw(), single.latents.nbytes()));
  // The .fp16 variant, read where it is the only one and where --variant
  // picks it, holds the same values (the files were made so): the same bytes.
  EXPECT_EQ(single.pixels, generate(kCheckpoints / "sd1-diffusers").pixels);
  EXPECT_EQ(single.pixels, generate(kCheckpoints / "sd1-diffusers-sharded", {.variant = "fp16"}).pixels);
  // The ONNX export of the same weights: other graphs (exported op by op,
  // fused by the passes), so equal to rounding.
  const Generation onnx = generate(kCheckpoints / "sd1-onnx");
  const int onnx_difference = max_pixel_difference(single, onnx);
  std::printf("  sd1: single file vs ONNX export, max pixel difference %d\n", onnx_difference);
  EXPECT_LE(onnx_difference, 1);
  // SD 2.x in f16: the single file and its diffusers folder (the text
  // encoder converted, its last layer dropped), byte for byte.
  const Generation sd2 = generate(kCheckpoints / "sd2.safetensors");
  EXPECT_EQ(sd2.scheduler, "ddim");
  EXPECT_EQ(sd2.pixels, generate(kCheckpoints / "sd2-diffusers").pixels);
}

// Freeing each stage once done (a one-shot run's memory) changes no pixel,
// and a later generation compiles what was freed again; eager too.
TEST(CheckpointForms, ReleasingStagesChangesNothing) {
  for (const ModeCase& m : kModes) {
    SCOPED_TRACE(m.name);
    auto pipe = load_pipeline(m, kCheckpoints / "sdxl.safetensors");
    ASSERT_TRUE(pipe);
    GenerateOptions o{.prompt = "a red circle", .steps = 3, .seed = 7, .width = 32, .height = 32};
    auto kept = pipe->generate(o);
    o.release_stages = true;
    auto freed = pipe->generate(o), again = pipe->generate(o);
    ASSERT_TRUE(kept.ok() && freed.ok() && again.ok()) << kept.status().message() << freed.status().message();
    EXPECT_EQ(kept->pixels, freed->pixels);
    EXPECT_EQ(kept->pixels, again->pixels);
  }
}

// SDXL's empty negative prompt is zeros unless model_index.json says
// force_zeros_for_empty_prompt: false; then it is the encoding of "", which
// is the encoding of " " (the tokenizer drops the whitespace): the same
// pixels as " " with the zeros rule on, and other pixels than "" with it.
TEST(CheckpointForms, SdxlFolderSaysWhetherAnEmptyNegativeIsZeros) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("kiln-force-zeros-{}", getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& entry : fs::directory_iterator(kCheckpoints / "sdxl-diffusers"))
    if (entry.path().filename() != "model_index.json") fs::create_directory_symlink(entry.path(), dir / entry.path().filename());
  {
    std::ifstream in(kCheckpoints / "sdxl-diffusers" / "model_index.json");
    nlohmann::json index = nlohmann::json::parse(in);
    index["force_zeros_for_empty_prompt"] = false;
    std::ofstream(dir / "model_index.json") << index.dump();
  }
  auto generate = [](const fs::path& model, const char* negative) {
    auto pipe = Pipeline::load(model.string(), {});
    EXPECT_TRUE(pipe.ok()) << pipe.status().message();
    auto g = (*pipe)->generate({.prompt = "a red circle", .negative_prompt = negative, .steps = 3, .seed = 9,
                                .width = 32, .height = 32});
    EXPECT_TRUE(g.ok()) << g.status().message();
    return g->pixels;
  };
  const std::vector<uint8_t> encoded = generate(dir, "");
  EXPECT_EQ(encoded, generate(kCheckpoints / "sdxl-diffusers", " "));
  EXPECT_NE(encoded, generate(kCheckpoints / "sdxl-diffusers", ""));
  fs::remove_all(dir);
}

TEST(CheckpointForms, PredictionTypeCanBeOverridden) {
  const Generation v = generate(kCheckpoints / "sd2.safetensors");
  const Generation eps = generate(kCheckpoints / "sd2.safetensors", {.prediction = PredictionType::kEpsilon});
  ASSERT_FALSE(v.pixels.empty() || eps.pixels.empty());
  EXPECT_NE(v.pixels, eps.pixels);
}

TEST(CheckpointForms, SingleFilesFindTheirTokenizer) {
  // Elsewhere than beside the file: --tokenizer, else $KILN_TOKENIZER_DIR, else an error naming both tables.
  const fs::path dir = fs::temp_directory_path() / "kiln_checkpoint_tokenizer_test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::create_symlink(kCheckpoints / "sd1.safetensors", dir / "sd1.safetensors");
  unsetenv("KILN_TOKENIZER_DIR");
  auto missing = Pipeline::load((dir / "sd1.safetensors").string(), {});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("vocab.json and merges.txt"), std::string::npos) << missing.status().message();
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  const Generation reference = generate(kCheckpoints / "sd1.safetensors");
  EXPECT_EQ(generate(dir / "sd1.safetensors", {.tokenizer_dir = (kCheckpoints / "sd1-tokenizer").string()}).pixels,
            reference.pixels);
  setenv("KILN_TOKENIZER_DIR", (kCheckpoints / "tokenizer").c_str(), 1);
  EXPECT_EQ(generate(dir / "sd1.safetensors").pixels, reference.pixels);
  unsetenv("KILN_TOKENIZER_DIR");
  auto wrong = Pipeline::load((dir / "sd1.safetensors").string(), {.tokenizer_dir = dir.string()});
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("--tokenizer"), std::string::npos) << wrong.status().message();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiln::testing
