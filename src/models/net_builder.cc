#include "models/net_builder.h"

#include <cmath>

#include "ir/attention_attrs.h"

namespace kiln {

namespace {
using Ints = std::vector<int64_t>;
constexpr int64_t kOnnxFloat = 1;  // Cast's "to": ONNX's TensorProto.FLOAT
}  // namespace

std::string NetBuilder::param_name(std::string_view name) const {
  const std::string path = b.module_path(root_depth_);
  return path.empty() ? std::string(name) : path + "." + std::string(name);
}

bool NetBuilder::has(std::string_view name) const {
  const std::string full = param_name(name);
  return w.contains(full) || !w.names_with_prefix(full + ".").empty();
}

const Tensor* NetBuilder::tensor(std::string_view name) const { return w.find(param_name(name)); }

Value* NetBuilder::stored(std::string_view name) {
  const std::string full = param_name(name);
  const Tensor* t = w.find(full);
  if (!t) return b.fail(not_found("{}: the weight '{}' is missing", w.label(), full));
  return b.constant(full, *t);
}

Value* NetBuilder::param(std::string_view name) {
  Value* v = stored(name);
  // A narrower parameter becomes f32 by a Cast that a plan folds once.
  if (!b.ok() || v->dtype == DType::kF32) return v;
  return b.op(OpKind::kCast, {v}, {{"to", kOnnxFloat}}, std::string(name) + "_f32");
}

Value* NetBuilder::linear(Value* x, std::string_view module, std::string_view activation, float alpha,
                          Value* residual, Value* gate) {
  GraphBuilder::Scope scope = b.scope(module);
  Value* weight = stored("weight");
  if (b.ok() && weight->shape && weight->shape->size() > 2) weight = reshape(weight, {(*weight->shape)[0].value, -1});
  std::vector<Value*> inputs = {x, weight, has("bias") ? param("bias") : nullptr, residual, gate};
  while (!inputs.back()) inputs.pop_back();
  Attributes attrs{{"transB", int64_t(1)}, {"activation", std::string(activation)}};
  if (alpha != 1.0f) attrs.set("alpha", alpha);
  return b.op(OpKind::kLinear, std::move(inputs), std::move(attrs), "Linear");
}

Value* NetBuilder::conv(Value* x, std::string_view module, const ConvArgs& args) {
  GraphBuilder::Scope scope = b.scope(module);
  Value* weight = stored("weight");
  if (!b.ok()) return b.poison();
  if (args.per_frame && weight->shape && weight->shape->size() == 4) {
    const SymShape& k = *weight->shape;
    weight = reshape(weight, {k[0].value, k[1].value, 1, k[2].value, k[3].value});
  }
  const bool video = weight->shape && weight->shape->size() == 5;
  if (!weight->shape || (weight->shape->size() != 4 && !video))
    return b.fail(invalid_argument("{}: '{}' is no convolution's weight [out, in, (kt,) kh, kw]", w.label(),
                                   w.origin(param_name("weight"))));
  Ints kernel;
  for (size_t d = 2; d < weight->shape->size(); ++d) kernel.push_back((*weight->shape)[d].value);
  const int64_t p = args.pad, s = args.stride;
  Ints pads = args.pad_end_only ? Ints{0, 0, p, p} : Ints{p, p, p, p};
  Ints strides = {s, s};
  if (video) {
    pads = {args.pad_front, pads[0], pads[1], 0, pads[2], pads[3]};
    strides.insert(strides.begin(), args.stride_t);
  }
  std::vector<Value*> inputs = {x, weight, has("bias") ? param("bias") : nullptr, args.residual};
  while (!inputs.back()) inputs.pop_back();
  Attributes attrs{{"kernel_shape", kernel},
                   {"strides", strides},
                   {"pads", pads},
                   {"activation", std::string(args.activation)}};
  return b.op(OpKind::kFusedConv, std::move(inputs), std::move(attrs), "Conv");
}

Value* NetBuilder::group_norm(Value* x, std::string_view module, int64_t groups, float eps, bool silu) {
  GraphBuilder::Scope scope = b.scope(module);
  return b.op(OpKind::kGroupNorm, {x, param("weight"), param("bias")},
              {{"num_groups", groups}, {"epsilon", eps}, {"activation", std::string(silu ? "silu" : "none")}},
              "GroupNorm");
}

Value* NetBuilder::layer_norm(Value* x, std::string_view module, float eps) {
  GraphBuilder::Scope scope = b.scope(module);
  return b.op(OpKind::kLayerNormalization, {x, param("weight"), param("bias")},
              {{"axis", int64_t(-1)}, {"epsilon", eps}}, "LayerNormalization");
}

Value* NetBuilder::rms_norm(Value* x, std::string_view module, float eps, int64_t axis, bool silu,
                            std::string_view scale_name) {
  GraphBuilder::Scope scope = b.scope(module);
  Value* scale = param(scale_name);
  if (b.ok() && scale->shape && scale->shape->size() != 1) scale = reshape(scale, {-1});  // the VAE's [C, 1, 1, 1]
  return b.op(OpKind::kRmsNorm, {x, scale},
              {{"axis", axis}, {"epsilon", eps}, {"activation", std::string(silu ? "silu" : "none")}}, "RmsNorm");
}

Value* NetBuilder::attention(Value* q, Value* k, Value* v, int64_t heads, int64_t head_dim, Value* mask,
                             bool upcast, std::optional<float> scale) {
  // [B, S, H*D] viewed as [B, S, H, D]; the attention reads each through its
  // perm and writes [B, Sq, H, D] (out_perm), so no transpose is copied.
  auto split = [&](Value* x) { return reshape(x, {0, 0, heads, head_dim}); };
  std::vector<Value*> inputs = {split(q), split(k), split(v)};
  if (mask) inputs.push_back(mask);
  Attributes attrs{{attention_attrs::kScale, scale.value_or(float(1.0 / std::sqrt(double(head_dim))))},
                   {"q_perm", Ints{0, 2, 1, 3}},
                   {"k_perm", Ints{0, 2, 3, 1}},
                   {"v_perm", Ints{0, 2, 1, 3}},
                   {attention_attrs::kOutPerm, Ints{0, 2, 1, 3}}};
  if (upcast) attrs.set(attention_attrs::kUpcast, int64_t(1));
  Value* y = b.op(OpKind::kAttention, std::move(inputs), std::move(attrs), "Attention");
  return reshape(y, {0, 0, heads * head_dim});
}

Value* NetBuilder::resnet(Value* x, Value* temb_silu, int64_t groups, float eps, std::string_view module) {
  GraphBuilder::Scope scope = b.scope(module);
  Value* h = conv(group_norm(x, "norm1", groups, eps, true), "conv1", {.pad = 1});
  if (temb_silu) h = add(h, reshape(linear(temb_silu, "time_emb_proj"), {0, 0, 1, 1}));
  h = group_norm(h, "norm2", groups, eps, true);
  Value* skip = has("conv_shortcut") ? conv(x, "conv_shortcut") : x;
  return conv(h, "conv2", {.pad = 1, .residual = skip});
}

Value* NetBuilder::reshape(Value* x, const std::vector<int64_t>& shape) {
  return b.op(OpKind::kReshape, {x, b.ints("shape", shape)});
}

Value* NetBuilder::reshape_like(Value* x, Value* like) {
  return b.op(OpKind::kReshape, {x, b.op(OpKind::kShape, {like})});
}

Value* NetBuilder::transpose(Value* x, const std::vector<int64_t>& perm) {
  return b.op(OpKind::kTranspose, {x}, {{"perm", perm}});
}

Value* NetBuilder::concat(const std::vector<Value*>& xs, int64_t axis) {
  return b.op(OpKind::kConcat, xs, {{"axis", axis}});
}

Value* NetBuilder::to_tokens(Value* x) { return transpose(reshape(x, {0, 0, -1}), {0, 2, 1}); }

Value* NetBuilder::from_tokens(Value* tokens, Value* like) {
  return reshape_like(transpose(tokens, {0, 2, 1}), like);
}

Value* NetBuilder::upsample2x(Value* x) {
  return b.op(OpKind::kResize, {x, nullptr, b.floats("scales", {4}, {1.0f, 1.0f, 2.0f, 2.0f})},
              {{"mode", std::string("nearest")},
               {"coordinate_transformation_mode", std::string("asymmetric")},
               {"nearest_mode", std::string("floor")}});
}

}  // namespace kiln
