// Wan2.2's diffusion transformer (TI2V-5B: diffusers' WanTransformer3DModel,
// Wan's wan/modules/model.py), built from its weights under diffusers' names
// (models/wan_names.h maps the original and Comfy layouts).
//
//   KILN_ASSIGN_OR_RETURN(WanTransformerConfig config, wan_transformer_config_from_weights(weights, heads));
//   WanVideoShape shape{.batch = 2, .frames = 5, .height = 16, .width = 16};   // latent sizes
//   KILN_ASSIGN_OR_RETURN(Graph dit, wan_transformer_graph(config, weights, shape, /*first_frame_clean=*/false));
//
// The graph: hidden_states [B, C, F, H, W] (the latents), timestep [B] (f32,
// whole numbers: the scheduler's int64 timesteps) and encoder_hidden_states
// [B, 512, text_dim] (the text encoder's output zero-padded to 512 rows) ->
// sample [B, C, F, H, W], the predicted velocity.
//
// Per-frame timesteps (TI2V): with first_frame_clean (image-to-video) the
// tokens of latent frame 0 see timestep 0, the others timestep[b]. The time
// embedding and its 6-way modulation are computed once per distinct
// timestep (timestep[b], and 0), never per token, and each latent frame's
// tokens read theirs: the norms, gates and head run on [B * F, H * W, C]
// views of the token rows, one modulation row per frame.
//
// Built for one latent size: the RoPE tables (in double, as Wan computes
// them) and the per-frame views depend on the grid.
#pragma once

#include "ir/graph.h"
#include "models/net_builder.h"

namespace kiln {

struct WanTransformerConfig {
  int64_t in_channels = 48, out_channels = 48;
  int64_t dim = 3072, ffn_dim = 14336, heads = 24, layers = 30;
  int64_t text_dim = 4096, freq_dim = 256;
  int64_t patch_t = 1, patch_h = 2, patch_w = 2;
  float eps = 1e-6f;
  int64_t head_dim() const { return dim / heads; }
};

// Everything from the weights' shapes but the head count: `heads` (a
// config.json's), or heads of 128 channels (Wan's) when it is 0. An error
// naming what does not fit a Wan transformer (Wan2.1's image K/V included).
Result<WanTransformerConfig> wan_transformer_config_from_weights(const WeightSet& weights, int64_t heads);

struct WanVideoShape {
  int64_t batch = 1, frames = 1, height = 0, width = 0;  // latent frames, rows and columns
};
// An error unless `shape` is whole patches of a size a plan can hold.
Status wan_check_shape(const WanTransformerConfig& config, const WanVideoShape& shape);

// The predicted velocity for hidden_states at `timestep` [B] given `context`.
Value* build_wan_transformer(NetBuilder& n, const WanTransformerConfig& config, const WanVideoShape& shape,
                             bool first_frame_clean, Value* hidden_states, Value* timestep, Value* context);
Result<Graph> wan_transformer_graph(const WanTransformerConfig& config, const WeightSet& weights,
                                    const WanVideoShape& shape, bool first_frame_clean);

// The RoPE angles of a (frames, rows, columns) token grid for heads of
// `head_dim`: cos and sin [tokens, head_dim / 2], tokens row-major over the
// grid; Wan's split of the pairs: head_dim - 4 (head_dim / 6) dims for the
// frame, 2 (head_dim / 6) each for the row and the column, theta 10000.
void wan_rope_tables(int64_t head_dim, int64_t frames, int64_t rows, int64_t columns, std::vector<float>& cos,
                     std::vector<float>& sin);

}  // namespace kiln
