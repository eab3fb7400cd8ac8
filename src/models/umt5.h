// The UMT5 encoder (Wan's text encoder, UMT5-XXL: Hugging Face's
// UMT5EncoderModel, Wan's wan/modules/t5.py), built from its weights under
// Hugging Face's names (models/wan_names.h maps Wan's own).
//
//   KILN_ASSIGN_OR_RETURN(Umt5Config config, umt5_config_from_weights(weights, /*max_distance=*/128));
//   KILN_ASSIGN_OR_RETURN(Graph encoder, umt5_graph(config, weights, /*tokens=*/12));
//
// The graph: input_ids [1, tokens] (i64, the prompt's real tokens, </s>
// included) -> last_hidden_state [1, tokens, d_model]. Run on the real
// tokens only: padding keys are masked in the reference and the position
// bias depends only on distances, so the real rows come out the same as
// from the padded 512 (the pipeline zero-pads the output to 512 rows).
//
// Per layer: RMSNorm, attention without the 1/sqrt(d) scale plus the
// layer's own relative position bias (bidirectional buckets), RMSNorm, the
// gated tanh-GELU feed-forward; a final RMSNorm. The embedding table stays
// as stored (bf16 in released files): only the prompt's rows are widened.
#pragma once

#include "ir/graph.h"
#include "models/weights.h"

namespace kiln {

struct Umt5Config {
  int64_t vocab = 256384, d_model = 4096, heads = 64, d_kv = 64, d_ff = 10240, layers = 24;
  int64_t buckets = 32, max_distance = 128;
  float eps = 1e-6f;
};

// From the weights' shapes; `max_distance` (no shape holds it) from a
// config.json, 128 otherwise.
Result<Umt5Config> umt5_config_from_weights(const WeightSet& weights, int64_t max_distance);

// T5's bidirectional relative-position bucket of key position - query
// position, as transformers computes it (in f32).
int64_t umt5_bucket(int64_t relative_position, int64_t buckets, int64_t max_distance);

Result<Graph> umt5_graph(const Umt5Config& config, const WeightSet& weights, int64_t tokens);

}  // namespace kiln
