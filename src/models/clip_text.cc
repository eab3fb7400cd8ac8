#include "models/clip_text.h"

#include <limits>

#include "models/net_builder.h"

namespace kiln {

namespace {

constexpr int64_t kMaxLayers = 128, kMaxPositions = 1024;  // CLIP's text towers have 77

// A pre-LN block: causal self-attention, then the MLP, each residual.
Value* encoder_layer(NetBuilder& n, const ClipTextConfig& c, Value* x, Value* causal_mask, std::string_view module) {
  GraphBuilder::Scope scope = n.b.scope(module);
  Value* h = n.layer_norm(x, "layer_norm1", c.eps);
  {
    GraphBuilder::Scope attention = n.b.scope("self_attn");
    Value* a = n.attention(n.linear(h, "q_proj"), n.linear(h, "k_proj"), n.linear(h, "v_proj"), c.heads,
                           c.width / c.heads, causal_mask);
    x = n.linear(a, "out_proj", "none", 1.0f, x);
  }
  h = n.layer_norm(x, "layer_norm2", c.eps);
  // QuickGELU is x sigmoid(1.702 x): kiln.Linear's swish with that alpha.
  const bool quick = c.activation == "quick_gelu";
  h = n.linear(h, "mlp.fc1", quick ? "swish" : "gelu", quick ? 1.702f : 1.0f);
  return n.linear(h, "mlp.fc2", "none", 1.0f, x);
}

}  // namespace

Result<ClipTextConfig> clip_text_config_from_weights(const WeightSet& w) {
  ClipTextConfig c;
  KILN_ASSIGN_OR_RETURN(Shape tokens, w.checked_shape("text_model.embeddings.token_embedding.weight", 2));
  KILN_ASSIGN_OR_RETURN(Shape positions, w.checked_shape("text_model.embeddings.position_embedding.weight", 2));
  KILN_ASSIGN_OR_RETURN(Shape fc1, w.checked_shape("text_model.encoder.layers.0.mlp.fc1.weight", 2));
  c.vocab_size = tokens[0];
  c.width = tokens[1];
  c.max_positions = positions[0];
  c.intermediate = fc1[0];
  c.layers = w.indexed_count("text_model.encoder.layers.");
  if (positions[1] != c.width || fc1[1] != c.width)
    return invalid_argument("{}: the token embedding is {} wide, the position embedding {} and the MLP's input {}",
                            w.label(), c.width, positions[1], fc1[1]);
  if (c.layers < 1 || c.layers > kMaxLayers || c.max_positions < 2 || c.max_positions > kMaxPositions)
    return invalid_argument("{}: {} layers and {} positions are not a CLIP text encoder's", w.label(), c.layers,
                            c.max_positions);
  c.heads = std::max<int64_t>(1, c.width / 64);
  return c;
}

Result<Graph> clip_text_graph(const ClipTextConfig& c, const WeightSet& weights) {
  if (c.heads < 1 || c.width % c.heads)
    return invalid_argument("{}: a width of {} does not split into {} heads", weights.label(), c.width, c.heads);
  if (c.activation != "quick_gelu" && c.activation != "gelu")
    return unsupported("{}: activation '{}' (kiln runs quick_gelu and gelu)", weights.label(), c.activation);
  if (c.hidden_skip < 0 || c.hidden_skip >= c.layers)
    return invalid_argument("{}: hidden states {} blocks before the last of {}", weights.label(), c.hidden_skip,
                            c.layers);
  if (c.pooled && !weights.contains("text_projection.weight") && !weights.contains("text_projection"))
    return not_found("{}: no text_projection, which the pooled text needs", weights.label());
  GraphBuilder b("text_encoder");
  NetBuilder n(b, weights);
  const int64_t s = c.max_positions;
  Value* ids = b.input("input_ids", DType::kI64, {Dim::named("batch"), s});
  // Position i attends to positions 0..i.
  std::vector<float> causal(size_t(s * s), 0.0f);
  for (int64_t i = 0; i < s; ++i)
    for (int64_t j = i + 1; j < s; ++j) causal[size_t(i * s + j)] = std::numeric_limits<float>::lowest();
  Value* mask = b.floats("causal_mask", {s, s}, causal);
  Value* x = nullptr;
  {
    GraphBuilder::Scope text = b.scope("text_model");
    {
      GraphBuilder::Scope embeddings = b.scope("embeddings");
      // The table stays as stored: only the rows looked up are widened.
      x = b.op(OpKind::kGather, {n.stored("token_embedding.weight"), ids}, {{"axis", int64_t(0)}});
      if (b.ok() && x->dtype != DType::kF32) x = b.op(OpKind::kCast, {x}, {{"to", int64_t(1)}});
      x = n.add(x, n.param("position_embedding.weight"));
    }
    Value* hidden = x;
    for (int64_t i = 0; i < c.layers; ++i) {
      x = encoder_layer(n, c, x, mask, fmt::format("encoder.layers.{}", i));
      if (i == c.layers - 1 - c.hidden_skip) hidden = x;
    }
    if (c.final_norm) hidden = n.layer_norm(hidden, "final_layer_norm", c.eps);
    b.output(hidden, "hidden_states");
    if (c.pooled) x = n.layer_norm(x, "final_layer_norm", c.eps);
  }
  if (c.pooled) {
    // The end token's row: a one-hot of argmax(ids) over the positions, summed against x.
    Value* end = b.op(OpKind::kArgMax, {ids}, {{"axis", int64_t(1)}, {"keepdims", int64_t(1)}});
    std::vector<int64_t> places(static_cast<size_t>(s));
    for (int64_t i = 0; i < s; ++i) places[size_t(i)] = i;
    Value* one_hot = b.op(OpKind::kCast, {b.op(OpKind::kEqual, {end, b.ints("positions", places)})},
                          {{"to", int64_t(1)}});
    Value* row = b.op(OpKind::kReduceSum, {n.mul(x, n.reshape(one_hot, {0, s, 1})), b.ints("axis", {1})},
                      {{"keepdims", int64_t(0)}});
    Value* pooled = n.has("text_projection.weight")
                        ? n.linear(row, "text_projection")
                        : b.op(OpKind::kMatMul, {row, n.param("text_projection")});
    b.output(pooled, "text_embeds");
  }
  return std::move(b).finish();
}

}  // namespace kiln
