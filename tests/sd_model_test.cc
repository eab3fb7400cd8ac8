// Stable Diffusion checkpoints built natively (models/): every tiny
// checkpoint of tests/models/sd-checkpoints (written with its PyTorch
// references by tools/make_tiny_checkpoints.py), each network's output
// against PyTorch's within 1e-4 x max |reference|, eagerly and as a
// compiled plan; the family and configuration read from each form.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "models/sd_model.h"
#include "npy/npy.h"
#include "reference_close.h"
#include "safetensors/safetensors.h"
#include "runtime/eager_executor.h"
#include "runtime/plan.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

const fs::path kCheckpoints = fs::path(KILN_SOURCE_DIR) / "tests" / "models" / "sd-checkpoints";

struct CheckpointCase {
  const char* name;     // test name
  const char* path;     // under kCheckpoints
  const char* family;   // reference/<family>
  const char* variant;  // --variant
};
const CheckpointCase kCases[] = {
    {"sd1_single_file", "sd1.safetensors", "sd1", ""},
    {"sd1_diffusers_fp16", "sd1-diffusers", "sd1", ""},
    {"sd1_diffusers_sharded", "sd1-diffusers-sharded", "sd1", ""},
    {"sd1_diffusers_sharded_fp16", "sd1-diffusers-sharded", "sd1", "fp16"},
    {"sd2_single_file", "sd2.safetensors", "sd2", ""},
    {"sd2_diffusers", "sd2-diffusers", "sd2", ""},
};

std::shared_ptr<SdModel> open(const CheckpointCase& c) {
  auto m = sd_model_open((kCheckpoints / c.path).string(), {.variant = c.variant});
  EXPECT_TRUE(m.ok()) << m.status().message();
  return m.ok() ? *m : nullptr;
}

// Runs `graph` eagerly and as a plan on reference/<family>/<network>'s
// inputs and compares with its outputs.
void expect_matches_pytorch(const CheckpointCase& c, const std::string& network, Result<Graph> built) {
  ASSERT_TRUE(built.ok()) << built.status().message();
  const fs::path dir = kCheckpoints / "reference" / c.family / network;
  NamedTensors inputs;
  for (const Value* v : built->inputs()) {
    auto t = npy_read((dir / "inputs" / (v->name + ".npy")).string());
    ASSERT_TRUE(t.ok()) << t.status().message();
    inputs.emplace_back(v->name, std::move(*t));
  }
  const std::string output = built->outputs()[0]->name;
  auto expected = npy_read((dir / "outputs" / (output + ".npy")).string());
  ASSERT_TRUE(expected.ok()) << expected.status().message();
  testing::expect_both_ways_close(fmt::format("{} {}", c.name, network), std::move(*built), inputs, *expected);
}

class SdCheckpoint : public ::testing::TestWithParam<CheckpointCase> {};

TEST_P(SdCheckpoint, TextEncoderMatchesPyTorch) {
  auto m = open(GetParam());
  ASSERT_TRUE(m);
  expect_matches_pytorch(GetParam(), "text_encoder", clip_text_graph(m->text_config, m->text_encoder));
}

TEST_P(SdCheckpoint, UnetMatchesPyTorch) {
  auto m = open(GetParam());
  ASSERT_TRUE(m);
  expect_matches_pytorch(GetParam(), "unet", sd_unet_graph(m->unet_config, m->unet));
}

TEST_P(SdCheckpoint, VaeMatchesPyTorch) {
  auto m = open(GetParam());
  ASSERT_TRUE(m);
  expect_matches_pytorch(GetParam(), "vae_decoder", vae_decoder_graph(m->vae_config, m->vae));
  expect_matches_pytorch(GetParam(), "vae_encoder", vae_encoder_graph(m->vae_config, m->vae));
}

INSTANTIATE_TEST_SUITE_P(Forms, SdCheckpoint, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

// SDXL, both forms: the family, both text encoders (the first's hidden
// states; the second's and its pooled text_embeds) and the UNet with its
// added conditioning against PyTorch. (Its VAE is SD's, checked above.)
class SdxlCheckpoint : public ::testing::TestWithParam<CheckpointCase> {};

TEST_P(SdxlCheckpoint, IsReadAsSdxl) {
  auto m = open(GetParam());
  ASSERT_TRUE(m);
  EXPECT_EQ(m->family, SdFamily::kSdxl);
  EXPECT_TRUE(m->has_text_encoder && m->has_text_encoder_2);
  EXPECT_EQ(m->unet_config.context_dim, 96);
  EXPECT_EQ(m->unet_config.addition_time_embed_dim, 256);
  EXPECT_EQ(m->unet_config.text_embeds_dim, 48);
  EXPECT_EQ(m->unet_config.down_depth, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(m->unet_config.mid_depth, 2);
  EXPECT_FLOAT_EQ(m->vae_config.scaling_factor, 0.13025f);
  EXPECT_EQ(m->text_config.layers, 1);  // the penultimate of 2
  EXPECT_FALSE(m->text_config.final_norm);
  EXPECT_EQ(m->text_config_2.layers, 3);
  EXPECT_EQ(m->text_config_2.hidden_skip, 1);
  EXPECT_TRUE(m->text_config_2.pooled);
}

TEST_P(SdxlCheckpoint, TextEncodersMatchPyTorch) {
  auto m = open(GetParam());
  ASSERT_TRUE(m);
  expect_matches_pytorch(GetParam(), "text_encoder", clip_text_graph(m->text_config, m->text_encoder));
  expect_matches_pytorch(GetParam(), "text_encoder_2", clip_text_graph(m->text_config_2, m->text_encoder_2));
  // The second output, the pooled text.
  auto graph = clip_text_graph(m->text_config_2, m->text_encoder_2);
  ASSERT_TRUE(graph.ok()) << graph.status().message();
  const fs::path dir = kCheckpoints / "reference" / "sdxl" / "text_encoder_2";
  EagerExecutor exec(*graph);
  auto out = exec.run({{"input_ids", *npy_read((dir / "inputs" / "input_ids.npy").string())}});
  ASSERT_TRUE(out.ok()) << out.status().message();
  ASSERT_EQ(out->size(), 2u);
  testing::expect_close(fmt::format("{} text_embeds", GetParam().name), (*out)[1].view(),
                        *npy_read((dir / "outputs" / "text_embeds.npy").string()));
}

TEST_P(SdxlCheckpoint, UnetMatchesPyTorch) {
  auto m = open(GetParam());
  ASSERT_TRUE(m);
  expect_matches_pytorch(GetParam(), "unet", sd_unet_graph(m->unet_config, m->unet));
}

const CheckpointCase kSdxlCases[] = {
    {"sdxl_single_file", "sdxl.safetensors", "sdxl", ""},
    {"sdxl_diffusers", "sdxl-diffusers", "sdxl", ""},
};
INSTANTIATE_TEST_SUITE_P(Forms, SdxlCheckpoint, ::testing::ValuesIn(kSdxlCases),
                         [](const auto& info) { return std::string(info.param.name); });

// A full LCM UNet: its guidance embedded (time_embedding.cond_proj, input
// timestep_cond) against PyTorch.
TEST(LcmCheckpoint, UnetWithEmbeddedGuidanceMatchesPyTorch) {
  const CheckpointCase c{"lcm_diffusers", "lcm-diffusers", "lcm", ""};
  auto m = open(c);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->unet_config.time_cond_proj_dim, 32);
  expect_matches_pytorch(c, "unet", sd_unet_graph(m->unet_config, m->unet));
}

// A bf16 file (none is committed: made here from the f32 one) builds the
// network its values make in f32, to the bit: its weights stay bf16 in the
// graph, widened by the executors (kernels/kernel.h), its small parameters
// cast once.
TEST(SdCheckpointDtypes, Bf16WeightsComputeWhatTheirValuesDoInF32) {
  auto tensors = safetensors_read((kCheckpoints / "sd1.safetensors").string());
  ASSERT_TRUE(tensors.ok()) << tensors.status().message();
  NamedTensorList as_bf16, as_f32;
  for (const auto& [name, t] : *tensors) {
    if (t.dtype() != DType::kF32) {
      as_bf16.emplace_back(name, t);
      as_f32.emplace_back(name, t);
      continue;
    }
    Tensor b = *Tensor::empty(DType::kBF16, t.shape()), f = *Tensor::empty(DType::kF32, t.shape());
    for (int64_t i = 0; i < t.numel(); ++i) {
      b.data<bf16>()[i] = f32_to_bf16(t.data<float>()[i]);
      f.data<float>()[i] = bf16_to_f32(b.data<bf16>()[i]);
    }
    as_bf16.emplace_back(name, b);
    as_f32.emplace_back(name, f);
  }
  auto stored = sd_model_from_tensors(std::move(as_bf16), "sd1-bf16.safetensors");
  auto wide = sd_model_from_tensors(std::move(as_f32), "sd1-rounded.safetensors");
  ASSERT_TRUE(stored.ok() && wide.ok()) << stored.status().message();
  EXPECT_EQ((*stored)->unet.dtype_counts().count(DType::kBF16), 1u);
  const fs::path dir = kCheckpoints / "reference" / "sd1" / "unet";
  NamedTensors inputs;
  for (const char* name : {"sample", "timestep", "encoder_hidden_states"})
    inputs.emplace_back(name, *npy_read((dir / "inputs" / (std::string(name) + ".npy")).string()));
  std::vector<std::vector<float>> outputs;
  for (const auto& m : {*stored, *wide}) {
    auto graph = sd_unet_graph(m->unet_config, m->unet);
    ASSERT_TRUE(graph.ok()) << graph.status().message();
    EagerExecutor exec(*graph);
    auto out = exec.run(inputs);
    ASSERT_TRUE(out.ok()) << out.status().message();
    outputs.emplace_back((*out)[0].data<float>(), (*out)[0].data<float>() + (*out)[0].numel());
  }
  EXPECT_EQ(outputs[0], outputs[1]);
}

}  // namespace
}  // namespace kiln
