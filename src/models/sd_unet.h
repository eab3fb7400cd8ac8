// The Stable Diffusion 1.x/2.x and XL UNet (diffusers' UNet2DConditionModel,
// LDM's openaimodel.UNetModel), built from its weights under diffusers' names.
//
//   KILN_ASSIGN_OR_RETURN(SdUnetConfig config, sd_unet_config_from_weights(weights));
//   config.heads = sd_unet_heads(config, /*heads=*/8, /*head_dim=*/0);       // SD 1.x: 8 heads
//   KILN_ASSIGN_OR_RETURN(Graph unet, sd_unet_graph(config, weights));
//
// The architecture is read from the tensors' shapes: the levels and their
// widths, the resnets a level, which levels attend and how deep, the
// context width, a conv (SD 1.x) or linear (SD 2.x, XL) proj_in, SDXL's
// added conditioning (add_embedding, LDM's label_emb). Only the head count is
// not in any shape: a folder's config.json gives it, a family's rule
// otherwise (SD 1.x 8 heads, SD 2.x and XL heads of 64 channels).
//
// The graph: sample [batch, C, height, width], timestep [batch] (f32) and
// encoder_hidden_states [batch, sequence, context], and for SDXL text_embeds
// [batch, P] (the pooled text) and time_ids [batch, 6] (original size, crop,
// target size) -> out_sample, the names optimum's ONNX export gives them.
// SDXL's time embedding gains add_embedding(text_embeds ++ each time id's
// sinusoidal embedding, addition_time_embed_dim wide). A full LCM UNet
// (time_cond_proj_dim) takes its guidance as an input, timestep_cond
// [batch, time_cond_proj_dim], projected and added to the timestep's
// embedding (pipeline/pipeline.h's guidance_embedding() makes it).
#pragma once

#include <vector>

#include "ir/graph.h"
#include "models/net_builder.h"

namespace kiln {

struct SdUnetConfig {
  int64_t in_channels = 4, out_channels = 4;
  std::vector<int64_t> block_out_channels;  // per level
  int64_t layers_per_block = 2;             // resnets a down level (an up level has one more)
  std::vector<int64_t> down_depth;          // per level: transformer blocks an attention (0: none)
  std::vector<int64_t> up_depth;            // per up level (up_blocks.i), likewise
  int64_t mid_depth = 1;
  std::vector<int64_t> heads;               // per level; the middle block uses the last
  int64_t context_dim = 768;
  int64_t time_embed_dim = 1280;
  bool linear_projection = false;  // proj_in/proj_out Linear (SD 2.x) or 1x1 convolutions (SD 1.x)
  bool upcast_attention = false;   // attention kept in f32 under --precision bf16 (SD 2.1)
  int64_t norm_groups = 32;
  float norm_eps = 1e-5f;
  int64_t sample_size = 64;  // the latent size it was trained at (config.json; the family's otherwise)
  // SDXL's added conditioning: each time id embedded this wide (256; 0: none)
  // and the pooled text's width (add_embedding's input less 6 of those).
  int64_t addition_time_embed_dim = 0, text_embeds_dim = 0;
  // LCM: the embedded guidance's width (time_embedding.cond_proj's input; 0: none).
  int64_t time_cond_proj_dim = 0;

  int64_t levels() const { return int64_t(block_out_channels.size()); }
};

// Everything but the heads and the sample size, from the weights' names and
// shapes; an error naming what does not fit a UNet.
Result<SdUnetConfig> sd_unet_config_from_weights(const WeightSet& weights);
// Heads per level: `heads` each (SD 1.x), or channels / `head_dim` (SD 2.x).
std::vector<int64_t> sd_unet_heads(const SdUnetConfig& config, int64_t heads, int64_t head_dim);

// The UNet's inputs in a graph: text_embeds and time_ids only for a config
// with addition_time_embed_dim, timestep_cond only for one with
// time_cond_proj_dim.
struct SdUnetInputs {
  Value *sample = nullptr, *timestep = nullptr, *context = nullptr;
  Value *text_embeds = nullptr, *time_ids = nullptr, *timestep_cond = nullptr;
};
// The UNet's noise prediction, built into n's graph.
Value* build_sd_unet(NetBuilder& n, const SdUnetConfig& config, const SdUnetInputs& in);
Result<Graph> sd_unet_graph(const SdUnetConfig& config, const WeightSet& weights);

// Sinusoidal embedding of t [B] -> [B, dim], cosines first (diffusers'
// flip_sin_to_cos, shift 0, period 10000).
Value* timestep_embedding(NetBuilder& n, Value* t, int64_t dim);

}  // namespace kiln
