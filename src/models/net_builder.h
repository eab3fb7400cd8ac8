// What every network in models/ is written in: the graph builder
// (ir/builder.h) with the network's weights, each module's parameters found
// by its path (the builder's scopes joined by dots, as checkpoints name
// them), and the layers those networks share, emitted as kiln's fused ops
// (kiln.Linear, kiln.Conv, kiln.GroupNorm with its SiLU, kiln.Attention).
//
//   NetBuilder n(b, weights);
//   GraphBuilder::Scope block = n.b.scope("down_blocks.0");
//   x = n.conv(x, "downsamplers.0.conv", {.stride = 2, .pad = 1});  // reads down_blocks.0.downsamplers.0.conv.{weight,bias}
//
// A missing weight, or one of the wrong shape, is an error naming it and
// where it came from (the builder's first error sticks: ir/builder.h).
// Products' weights stay as the file stores them (f16, bf16 or f32:
// kernels/kernel.h's stored weights); biases and norms' parameters, a few
// kilobytes, are used as f32, widened where the file holds them narrower.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "ir/builder.h"
#include "models/weights.h"

namespace kiln {

struct ConvArgs {
  int64_t stride = 1;
  int64_t pad = 0;          // on every side (of a 3-D convolution: every side of H and W)
  bool pad_end_only = false;  // pad only after each axis (LDM's VAE downsample: (0, 1, 0, 1))
  std::string_view activation = "none";
  Value* residual = nullptr;  // added after the activation
  // 3-D only: frames of causal padding in front (the rest of the time axis unpadded)
  // and the stride along time.
  int64_t pad_front = 0, stride_t = 1;
  // A 2-D weight [O, I, kh, kw] applied to each frame of a video [N, C, T, H, W].
  bool per_frame = false;
};

class NetBuilder {
 public:
  // Weights are named from the builder's scopes opened after this point (a
  // network built inside a larger graph's "unet" scope still reads conv_in.weight).
  NetBuilder(GraphBuilder& builder, const WeightSet& weights)
      : b(builder), w(weights), root_depth_(builder.scope_depth()) {}

  GraphBuilder& b;
  const WeightSet& w;

  // The full name of parameter `name` of the module in scope.
  std::string param_name(std::string_view name) const;
  // Whether the module in scope has parameter (or submodule) `name`.
  bool has(std::string_view name) const;
  // A parameter as f32 (biases, norms, embeddings' small tables).
  Value* param(std::string_view name);
  // A parameter as stored (products' weights); its shape checked when given.
  Value* stored(std::string_view name);
  // The tensor of a parameter, for shapes (marks it used); null when absent.
  const Tensor* tensor(std::string_view name) const;

  // kiln.Linear over `module`'s weight [N, K] (transB; a 1x1 convolution's
  // [N, K, 1, 1] alike) and optional bias;
  // `gate` scales the product before the residual is added (see kiln.Linear).
  Value* linear(Value* x, std::string_view module, std::string_view activation = "none", float alpha = 1.0f,
                Value* residual = nullptr, Value* gate = nullptr);
  // kiln.Conv over `module`'s weight [O, I, kh, kw] (or [O, I, kt, kh, kw]:
  // a 3-D convolution) and bias.
  Value* conv(Value* x, std::string_view module, const ConvArgs& args = {});
  Value* group_norm(Value* x, std::string_view module, int64_t groups, float eps, bool silu);
  Value* layer_norm(Value* x, std::string_view module, float eps);
  // kiln.RmsNorm over `axis` with `module`'s `scale_name` parameter (any
  // shape of C values), then SiLU where `silu`.
  Value* rms_norm(Value* x, std::string_view module, float eps, int64_t axis = -1, bool silu = false,
                  std::string_view scale_name = "weight");
  // Multi-head attention over tokens: q [B, Sq, H*D], k and v [B, Sk, H*D]
  // -> [B, Sq, H*D]; scale D^-0.5 (or `scale` when given); an additive mask
  // broadcast to [B, H, Sq, Sk]; `upcast`: kept in f32 under bf16
  // (ir/attention_attrs.h).
  Value* attention(Value* q, Value* k, Value* v, int64_t heads, int64_t head_dim, Value* mask = nullptr,
                   bool upcast = false, std::optional<float> scale = std::nullopt);

  // diffusers' ResnetBlock2D (the UNet's and the VAE's): two GroupNorm-SiLU-
  // 3x3 conv stages, `temb_silu` [B, T] (none in a VAE) projected and added
  // between them, a 1x1 conv on the skip where the width changes.
  Value* resnet(Value* x, Value* temb_silu, int64_t groups, float eps, std::string_view module);

  // Plain ops.
  Value* add(Value* a, Value* c) { return b.op(OpKind::kAdd, {a, c}); }
  Value* mul(Value* a, Value* c) { return b.op(OpKind::kMul, {a, c}); }
  Value* silu(Value* x) { return b.op(OpKind::kSilu, {x}); }
  Value* reshape(Value* x, const std::vector<int64_t>& shape);  // ONNX Reshape: 0 copies a dim, -1 infers one
  Value* reshape_like(Value* x, Value* like);                    // x in like's shape
  Value* transpose(Value* x, const std::vector<int64_t>& perm);
  Value* concat(const std::vector<Value*>& xs, int64_t axis);
  // [B, C, H, W] -> [B, H*W, C] and back (`like` gives H and W).
  Value* to_tokens(Value* x);
  Value* from_tokens(Value* tokens, Value* like);
  // Nearest-neighbour upsampling by 2 on H and W, as torch's interpolate.
  Value* upsample2x(Value* x);

 private:
  size_t root_depth_;
};

}  // namespace kiln
