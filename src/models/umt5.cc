#include "models/umt5.h"

#include <fmt/format.h>

#include <cmath>

#include "models/net_builder.h"

namespace kiln {

namespace {
constexpr int64_t kOnnxFloat = 1;  // Cast's "to": ONNX's TensorProto.FLOAT
}  // namespace

Result<Umt5Config> umt5_config_from_weights(const WeightSet& w, int64_t max_distance) {
  Umt5Config c;
  KILN_ASSIGN_OR_RETURN(const Shape embedding, w.checked_shape("shared.weight", 2));
  c.vocab = embedding[0], c.d_model = embedding[1];
  const std::string first = "encoder.block.0.layer.";
  KILN_ASSIGN_OR_RETURN(const Shape bias, w.checked_shape(first + "0.SelfAttention.relative_attention_bias.weight", 2));
  c.buckets = bias[0], c.heads = bias[1];
  KILN_ASSIGN_OR_RETURN(const Shape q, w.checked_shape(first + "0.SelfAttention.q.weight", 2));
  KILN_ASSIGN_OR_RETURN(const Shape wi, w.checked_shape(first + "1.DenseReluDense.wi_0.weight", 2));
  c.d_ff = wi[0];
  if (q[0] % c.heads != 0)
    return invalid_argument("{}: {} attention channels do not split into {} heads", w.label(), q[0], c.heads);
  c.d_kv = q[0] / c.heads;
  c.layers = w.indexed_count("encoder.block.");
  if (c.buckets < 2 || c.buckets % 2 != 0)
    return invalid_argument("{}: {} relative position buckets (an even count is needed)", w.label(), c.buckets);
  if (max_distance < c.buckets / 2)
    return invalid_argument("{}: a relative distance limit of {} is below the exact range", w.label(), max_distance);
  c.max_distance = max_distance;
  return c;
}

int64_t umt5_bucket(int64_t relative_position, int64_t buckets, int64_t max_distance) {
  const int64_t half = buckets / 2, exact = half / 2;
  const int64_t side = relative_position > 0 ? half : 0;
  const int64_t n = std::abs(relative_position);
  if (n < exact) return side + n;
  // f32 as transformers computes it: the truncation is exact at powers of two.
  const float log_ratio = std::log(float(n) / float(exact)) / float(std::log(double(max_distance) / double(exact)));
  return side + std::min<int64_t>(exact + int64_t(log_ratio * float(half - exact)), half - 1);
}

Result<Graph> umt5_graph(const Umt5Config& c, const WeightSet& weights, int64_t tokens) {
  if (tokens < 1) return invalid_argument("the text encoder needs at least one token");
  GraphBuilder b("text_encoder");
  NetBuilder n(b, weights);
  Value* ids = b.input("input_ids", DType::kI64, {1, tokens});
  // Only the prompt's rows of the (stored) table, then widened.
  Value* x = b.op(OpKind::kGather, {n.stored("shared.weight"), ids}, {{"axis", int64_t(0)}}, "Embedding");
  if (b.ok() && x->dtype != DType::kF32) x = b.op(OpKind::kCast, {x}, {{"to", kOnnxFloat}});
  std::vector<int64_t> buckets(size_t(tokens * tokens));
  for (int64_t i = 0; i < tokens; ++i)
    for (int64_t j = 0; j < tokens; ++j)
      buckets[size_t(i * tokens + j)] = umt5_bucket(j - i, c.buckets, c.max_distance);
  KILN_ASSIGN_OR_RETURN(Tensor bucket_tensor, Tensor::from_vector({tokens, tokens}, buckets));
  Value* bucket_table = b.constant("position_buckets", std::move(bucket_tensor));
  {
    GraphBuilder::Scope encoder = b.scope("encoder");
    for (int64_t layer = 0; layer < c.layers; ++layer) {
      GraphBuilder::Scope block = b.scope(fmt::format("block.{}", layer));
      {
        GraphBuilder::Scope attention = b.scope("layer.0");
        Value* h = n.rms_norm(x, "layer_norm", c.eps);
        GraphBuilder::Scope self = b.scope("SelfAttention");
        // This layer's bias [heads, tokens, tokens], a constant the plan folds.
        Value* bias =
            b.op(OpKind::kGather, {n.param("relative_attention_bias.weight"), bucket_table}, {{"axis", int64_t(0)}});
        bias = n.transpose(bias, {2, 0, 1});
        Value* a =
            n.attention(n.linear(h, "q"), n.linear(h, "k"), n.linear(h, "v"), c.heads, c.d_kv, bias, false, 1.0f);
        x = n.linear(a, "o", "none", 1.0f, x);
      }
      {
        GraphBuilder::Scope ffn = b.scope("layer.1");
        Value* h = n.rms_norm(x, "layer_norm", c.eps);
        GraphBuilder::Scope dense = b.scope("DenseReluDense");
        Value* gated = n.mul(n.linear(h, "wi_0", "gelu_tanh"), n.linear(h, "wi_1"));
        x = n.linear(gated, "wo", "none", 1.0f, x);
      }
    }
    x = n.rms_norm(x, "final_layer_norm", c.eps);
  }
  b.output(x, "last_hidden_state");
  return std::move(b).finish();
}

}  // namespace kiln
