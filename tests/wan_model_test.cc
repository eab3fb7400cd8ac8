// Wan2.2 TI2V built natively (models/wan_*.h, umt5.h): the tiny pipeline of
// tests/models/wan-tiny (written with its PyTorch references by
// tools/make_tiny_wan.py) in both layouts users hold, each network's output
// against PyTorch's within 1e-4 x max |reference|, eagerly and as a plan.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "models/wan_model.h"
#include "models/wan_names.h"
#include "npy/npy.h"
#include "reference_close.h"
#include "pipeline/video_decoder.h"
#include "runtime/eager_executor.h"
#include "runtime/plan.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

const fs::path kTiny = fs::path(KILN_SOURCE_DIR) / "tests" / "models" / "wan-tiny";
const fs::path kReference = kTiny / "reference";

Tensor read_npy(const fs::path& path) {
  auto t = npy_read(path.string());
  EXPECT_TRUE(t.ok()) << t.status().message();
  return t.ok() ? std::move(*t) : Tensor();
}

using testing::expect_close;

// Runs `graph` eagerly and as a plan on reference/<reference>'s inputs and
// compares with its output `output`.
void expect_matches_pytorch(const std::string& what, const std::string& reference, const std::string& output,
                            Result<Graph> built) {
  ASSERT_TRUE(built.ok()) << built.status().message();
  const fs::path dir = kReference / reference;
  NamedTensors inputs;
  for (const Value* v : built->inputs()) inputs.emplace_back(v->name, read_npy(dir / "inputs" / (v->name + ".npy")));
  testing::expect_both_ways_close(what, std::move(*built), inputs, read_npy(dir / "outputs" / (output + ".npy")));
}

struct Layout {
  const char* name;
  const char* folder;
};
const Layout kLayouts[] = {{"diffusers", "diffusers"}, {"original", "original"}};

class WanTiny : public ::testing::TestWithParam<Layout> {
 protected:
  WanFolder open() {
    auto f = wan_folder_open((kTiny / GetParam().folder).string(), "");
    EXPECT_TRUE(f.ok()) << f.status().message();
    return f.ok() ? *f : WanFolder{};
  }
};

TEST_P(WanTiny, FolderLayout) {
  const WanFolder f = open();
  EXPECT_TRUE(is_wan_folder(f.path));
  EXPECT_EQ(f.layout, std::string(GetParam().name) == "diffusers" ? WanLayout::kDiffusers : WanLayout::kOriginal);
  EXPECT_TRUE(fs::exists(f.tokenizer_model));
}

TEST_P(WanTiny, TransformerMatchesPyTorch) {
  auto dit = wan_load_transformer(open());
  ASSERT_TRUE(dit.ok()) << dit.status().message();
  const WanTransformerConfig& c = (*dit)->config;
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.heads, 2);
  EXPECT_EQ(c.layers, 2);
  EXPECT_EQ(c.text_dim, 32);
  const WanVideoShape shape{.batch = 2, .frames = 3, .height = 4, .width = 6};
  for (bool clean : {false, true}) {
    const std::string reference = clean ? "transformer_i2v" : "transformer_t2v";
    expect_matches_pytorch(fmt::format("{} {}", GetParam().name, reference), reference, "sample",
                           wan_transformer_graph(c, (*dit)->weights, shape, clean));
  }
  EXPECT_TRUE((*dit)->weights.unused().empty()) << (*dit)->weights.unused().front();
}

TEST_P(WanTiny, TextEncoderMatchesPyTorch) {
  auto text = wan_load_text_encoder(open());
  ASSERT_TRUE(text.ok()) << text.status().message();
  EXPECT_EQ((*text)->config.d_model, 32);
  EXPECT_EQ((*text)->config.heads, 4);
  for (const char* reference : {"text_encoder", "text_encoder_long"}) {
    const Tensor ids = read_npy(kReference / reference / "inputs" / "input_ids.npy");
    expect_matches_pytorch(fmt::format("{} {}", GetParam().name, reference), reference, "last_hidden_state",
                           umt5_graph((*text)->config, (*text)->weights, ids.shape()[1]));
  }
}

TEST_P(WanTiny, VaeEncoderMatchesPyTorch) {
  auto vae = wan_load_vae(open());
  ASSERT_TRUE(vae.ok()) << vae.status().message();
  EXPECT_EQ((*vae)->config.z_dim, 48);
  EXPECT_EQ((*vae)->config.spatial_factor, 16);
  EXPECT_EQ((*vae)->config.temporal_factor, 4);
  expect_matches_pytorch(fmt::format("{} vae_encoder", GetParam().name), "vae_encoder", "latent",
                         wan_vae_encoder_graph((*vae)->config, (*vae)->weights, 64, 96));
}

// Decoded one latent frame per call with the causal caches bound in place,
// frames streamed out (1, then 4 a call): the whole clip as PyTorch decodes it.
TEST_P(WanTiny, VaeDecoderStreamsWhatPyTorchDecodes) {
  auto vae = wan_load_vae(open());
  ASSERT_TRUE(vae.ok()) << vae.status().message();
  const Tensor latents = read_npy(kReference / "vae_decoder" / "inputs" / "latent.npy");
  const Tensor expected = read_npy(kReference / "vae_decoder" / "outputs" / "sample.npy");
  for (ExecutionMode mode : {ExecutionMode::kEager, ExecutionMode::kGraph}) {
    auto decoder = VideoDecoder::create((*vae)->config, (*vae)->weights, 4, 6, {.mode = mode});
    ASSERT_TRUE(decoder.ok()) << decoder.status().message();
    Tensor video = *Tensor::empty(DType::kF32, expected.shape());
    const int64_t frames = expected.shape()[2], plane = expected.shape()[3] * expected.shape()[4];
    int64_t written = 0;
    std::vector<int64_t> per_call;
    for (int pass = 0; pass < 2; ++pass) {  // twice: the caches start from zeros again
      written = 0;
      per_call.clear();
      Status st = (*decoder)->decode(latents, [&](const TensorView& chunk) {
        const int64_t t = chunk.shape[2];
        per_call.push_back(t);
        for (int64_t c = 0; c < 3; ++c)
          std::memcpy(video.data<float>() + (c * frames + written) * plane, chunk.as<float>() + c * t * plane,
                      size_t(t * plane) * sizeof(float));
        written += t;
        return ok_status();
      });
      ASSERT_TRUE(st.ok()) << st.message();
    }
    EXPECT_EQ(per_call, (std::vector<int64_t>{1, 4, 4}));
    ASSERT_EQ(written, frames);
    expect_close(fmt::format("{} vae_decoder {}", GetParam().name, execution_mode_name(mode)), video.view(), expected);
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, WanTiny, ::testing::ValuesIn(kLayouts),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(WanNames, OriginalKeysMapToDiffusers) {
  EXPECT_EQ(wan_transformer_name_from_original("model.diffusion_model.blocks.3.norm3.weight"), "blocks.3.norm2.weight");
  EXPECT_EQ(wan_transformer_name_from_original("blocks.0.self_attn.o.bias"), "blocks.0.attn1.to_out.0.bias");
  EXPECT_EQ(wan_transformer_name_from_original("head.modulation"), "scale_shift_table");
  EXPECT_EQ(wan_transformer_name_from_original("blocks.1.ffn.0.weight"), "blocks.1.ffn.net.0.proj.weight");
  EXPECT_EQ(wan_transformer_name_from_original("img_emb.proj.0.weight"), std::nullopt);
  EXPECT_EQ(umt5_name_from_original("blocks.5.pos_embedding.embedding.weight"),
            "encoder.block.5.layer.0.SelfAttention.relative_attention_bias.weight");
  EXPECT_EQ(umt5_name_from_original("blocks.0.ffn.gate.0.weight"),
            "encoder.block.0.layer.1.DenseReluDense.wi_0.weight");
  EXPECT_EQ(umt5_name_from_hf("encoder.embed_tokens.weight"), "shared.weight");
  EXPECT_EQ(wan_vae_name_from_original("decoder.upsamples.0.upsamples.3.time_conv.weight"),
            "decoder.up_blocks.0.upsampler.time_conv.weight");
  EXPECT_EQ(wan_vae_name_from_original("encoder.downsamples.1.downsamples.0.residual.3.gamma"),
            "encoder.down_blocks.1.resnets.0.norm2.gamma");
  EXPECT_EQ(wan_vae_name_from_original("decoder.middle.1.to_qkv.weight"),
            "decoder.mid_block.attentions.0.to_qkv.weight");
  EXPECT_EQ(wan_vae_name_from_original("conv2.bias"), "post_quant_conv.bias");
}

TEST(Umt5, RelativePositionBuckets) {
  // Exact below 8 each way (keys after the query in the upper 16), log-spaced
  // to 128, clamped past it.
  EXPECT_EQ(umt5_bucket(0, 32, 128), 0);
  EXPECT_EQ(umt5_bucket(-7, 32, 128), 7);
  EXPECT_EQ(umt5_bucket(7, 32, 128), 23);
  EXPECT_EQ(umt5_bucket(-16, 32, 128), 10);
  EXPECT_EQ(umt5_bucket(-1000, 32, 128), 15);
  EXPECT_EQ(umt5_bucket(1000, 32, 128), 31);
}

}  // namespace
}  // namespace kiln
