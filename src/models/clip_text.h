// CLIP's text encoder (Hugging Face transformers' CLIPTextModel; OpenCLIP's
// text tower once models/ldm_names.h has renamed it), built from its
// weights under transformers' names (text_model.embeddings...,
// text_model.encoder.layers.N..., text_model.final_layer_norm).
//
//   KILN_ASSIGN_OR_RETURN(ClipTextConfig config, clip_text_config_from_weights(weights));
//   config.layers -= 1;  // SD 2.x: the penultimate layer's output
//   KILN_ASSIGN_OR_RETURN(Graph text, clip_text_graph(config, weights));
//
// The graph: input_ids [batch, max_positions] (i64) -> hidden_states
// [batch, max_positions, width], the output of `layers` pre-LN blocks with
// causal self-attention, then the final LayerNorm: the context Stable
// Diffusion's UNet attends to. SDXL reads its encoders differently: the
// hidden states of the penultimate block without the final LayerNorm and,
// from its second encoder, the pooled text (text_embeds [batch, projection]):
// the last block's output at the end token (the largest id, CLIP's
// convention), final-normed and projected by text_projection.
#pragma once

#include <string>

#include "ir/graph.h"
#include "models/weights.h"

namespace kiln {

struct ClipTextConfig {
  int64_t vocab_size = 49408, width = 768, intermediate = 3072, max_positions = 77;
  int64_t layers = 12;  // blocks run: all the weights hold, or fewer (SD 2.x stops at the penultimate)
  int64_t heads = 12;   // not in any shape: config.json's, else width / 64 (every CLIP text tower)
  std::string activation = "quick_gelu";  // or "gelu" (OpenCLIP's)
  float eps = 1e-5f;
  // hidden_states: the output of block layers - hidden_skip (SDXL's second
  // encoder: 1, the penultimate), final-normed where final_norm (SDXL: not).
  int64_t hidden_skip = 0;
  bool final_norm = true;
  // A second output, text_embeds: the pooled text through text_projection
  // (transformers' [P, width] text_projection.weight, or OpenCLIP's [width, P]).
  bool pooled = false;
};

// Everything but the heads' count (width / 64) and the activation
// (quick_gelu), which no shape holds, from the weights.
Result<ClipTextConfig> clip_text_config_from_weights(const WeightSet& weights);
Result<Graph> clip_text_graph(const ClipTextConfig& config, const WeightSet& weights);

}  // namespace kiln
