#include "models/wan_transformer.h"

#include <fmt/format.h>

#include <cmath>

namespace kiln {

namespace {

using Ints = std::vector<int64_t>;
constexpr int64_t kOnnxInt64 = 7;  // Cast's "to": ONNX's TensorProto.INT64
// Timesteps are whole numbers in [0, 1000] (flow sigmas times 1000), so the
// sinusoids come from a table computed once in double, as Wan computes
// them, where f32 arguments t * f would lose digits at t near 1000.
constexpr int64_t kTimestepRows = 1001;

// Rows [cos(t f_i), sin(t f_i)] for t = 0 .. 1000, f_i = 10000^(-i / half).
Value* sinusoid_table(GraphBuilder& b, int64_t freq_dim) {
  const int64_t half = freq_dim / 2;
  std::vector<float> rows(size_t(kTimestepRows * freq_dim));
  for (int64_t t = 0; t < kTimestepRows; ++t)
    for (int64_t i = 0; i < half; ++i) {
      const double angle = double(t) * std::pow(10000.0, -double(i) / double(half));
      rows[size_t(t * freq_dim + i)] = float(std::cos(angle));
      rows[size_t(t * freq_dim + half + i)] = float(std::sin(angle));
    }
  return b.floats("timestep_sinusoids", {kTimestepRows, freq_dim}, rows);
}

struct Modulation {
  Value *shift1, *scale1, *gate1, *shift2, *scale2, *gate2;  // each [B * F, 1, dim]; scales as 1 + scale
};

// A block's six rows for each frame: its table [1, 6, dim] plus the frame's
// projected time embedding [B * F, 6, dim], split; the scales as 1 + scale,
// the form kiln.ModulatedLayerNorm takes.
Modulation block_modulation(NetBuilder& n, Value* projection, Value* one) {
  Value* mod = n.add(projection, n.param("scale_shift_table"));
  const std::vector<Value*> rows = n.b.ops(OpKind::kSplit, {mod}, 6, {{"axis", int64_t(1)}}, "Split");
  if (!n.b.ok()) return {};
  return {rows[0], n.add(rows[1], one), rows[2], rows[3], n.add(rows[4], one), rows[5]};
}

}  // namespace

Result<WanTransformerConfig> wan_transformer_config_from_weights(const WeightSet& w, int64_t heads) {
  WanTransformerConfig c;
  if (w.contains("condition_embedder.image_embedder.norm1.weight") || w.contains("blocks.0.attn2.add_k_proj.weight"))
    return invalid_argument(
        "{}: image keys and values (Wan2.1 image-to-video) are not supported; kiln runs Wan2.2 TI2V", w.label());
  KILN_ASSIGN_OR_RETURN(const Shape patch, w.checked_shape("patch_embedding.weight", 5));
  c.dim = patch[0], c.in_channels = patch[1], c.patch_t = patch[2], c.patch_h = patch[3], c.patch_w = patch[4];
  KILN_ASSIGN_OR_RETURN(const Shape ffn, w.checked_shape("blocks.0.ffn.net.0.proj.weight", 2));
  c.ffn_dim = ffn[0];
  KILN_ASSIGN_OR_RETURN(const Shape text, w.checked_shape("condition_embedder.text_embedder.linear_1.weight", 2));
  c.text_dim = text[1];
  KILN_ASSIGN_OR_RETURN(const Shape time, w.checked_shape("condition_embedder.time_embedder.linear_1.weight", 2));
  c.freq_dim = time[1];
  KILN_ASSIGN_OR_RETURN(const Shape out, w.checked_shape("proj_out.weight", 2));
  const int64_t patch_volume = c.patch_t * c.patch_h * c.patch_w;
  if (out[0] % patch_volume != 0)
    return invalid_argument("{}: proj_out.weight has {} rows, no whole number of {}-value patches", w.label(), out[0],
                            patch_volume);
  c.out_channels = out[0] / patch_volume;
  c.layers = w.indexed_count("blocks.");
  if (c.layers < 1) return invalid_argument("{}: no transformer blocks (blocks.0...)", w.label());
  c.heads = heads > 0 ? heads : c.dim / 128;
  if (c.heads < 1 || c.dim % c.heads != 0 || c.head_dim() % 2 != 0 || c.head_dim() < 6)
    return invalid_argument("{}: width {} does not split into {} heads of an even size of 6 or more", w.label(), c.dim,
                            c.heads);
  if (c.freq_dim % 2 != 0) return invalid_argument("{}: an odd sinusoid width {}", w.label(), c.freq_dim);
  return c;
}

Status wan_check_shape(const WanTransformerConfig& c, const WanVideoShape& s) {
  if (s.batch < 1 || s.frames < 1 || s.height < 1 || s.width < 1 || s.frames % c.patch_t != 0 ||
      s.height % c.patch_h != 0 || s.width % c.patch_w != 0)
    return invalid_argument("latents of {} frames x {} x {} are no whole {}x{}x{} patches", s.frames, s.height, s.width,
                            c.patch_t, c.patch_h, c.patch_w);
  // Sequence lengths past this would not fit any machine's memory anyway.
  if (s.frames * s.height * s.width > (int64_t(1) << 24)) return invalid_argument("the latents are too large");
  return ok_status();
}

void wan_rope_tables(int64_t head_dim, int64_t frames, int64_t rows, int64_t columns, std::vector<float>& cos,
                     std::vector<float>& sin) {
  const int64_t side = 2 * (head_dim / 6), axis_dims[3] = {head_dim - 2 * side, side, side};
  const int64_t pairs = head_dim / 2, tokens = frames * rows * columns;
  cos.assign(size_t(tokens * pairs), 0.0f);
  sin.assign(size_t(tokens * pairs), 0.0f);
  for (int64_t f = 0, token = 0; f < frames; ++f)
    for (int64_t h = 0; h < rows; ++h)
      for (int64_t w = 0; w < columns; ++w, ++token) {
        const int64_t position[3] = {f, h, w};
        int64_t pair = 0;
        for (int axis = 0; axis < 3; ++axis)
          for (int64_t j = 0; j < axis_dims[axis] / 2; ++j, ++pair) {
            const double angle = double(position[axis]) * std::pow(10000.0, -2.0 * double(j) / double(axis_dims[axis]));
            cos[size_t(token * pairs + pair)] = float(std::cos(angle));
            sin[size_t(token * pairs + pair)] = float(std::sin(angle));
          }
      }
}

Value* build_wan_transformer(NetBuilder& n, const WanTransformerConfig& c, const WanVideoShape& s,
                             bool first_frame_clean, Value* hidden_states, Value* timestep, Value* context) {
  GraphBuilder& b = n.b;
  const int64_t frames = s.frames / c.patch_t, rows = s.height / c.patch_h, columns = s.width / c.patch_w;
  const int64_t plane = rows * columns, tokens = frames * plane, views = s.batch * frames;
  const float eps = c.eps;

  // Tokens [B, L, dim], row-major over (frame, row, column).
  Value* x = n.conv(hidden_states, "patch_embedding", {.stride = c.patch_h, .stride_t = c.patch_t});
  x = n.transpose(n.reshape(x, {s.batch, c.dim, tokens}), {0, 2, 1});

  // The time embedding of each distinct timestep: timestep[b], and 0 for a
  // clean first frame; each latent frame's rows gathered from those.
  Value *temb, *projection;
  {
    GraphBuilder::Scope embedder = b.scope("condition_embedder");
    Value* steps = b.op(OpKind::kCast, {timestep}, {{"to", kOnnxInt64}});
    if (first_frame_clean) steps = n.concat({steps, b.ints("clean", {0})}, 0);
    Value* sinusoids = b.op(OpKind::kGather, {sinusoid_table(b, c.freq_dim), steps}, {{"axis", int64_t(0)}});
    GraphBuilder::Scope time = b.scope("time_embedder");
    temb = n.linear(n.linear(sinusoids, "linear_1", "swish"), "linear_2");
  }
  {
    GraphBuilder::Scope embedder = b.scope("condition_embedder");
    projection = n.linear(n.silu(temb), "time_proj");
  }
  Ints frame_rows;
  for (int64_t i = 0; i < s.batch; ++i)
    for (int64_t f = 0; f < frames; ++f) frame_rows.push_back(first_frame_clean && f == 0 ? s.batch : i);
  Value* rows_of_frames = b.ints("frame_rows", frame_rows);
  auto per_frame = [&](Value* table) { return b.op(OpKind::kGather, {table, rows_of_frames}, {{"axis", int64_t(0)}}); };
  Value* frame_temb = n.reshape(per_frame(temb), {views, 1, c.dim});
  Value* frame_projection = n.reshape(per_frame(projection), {views, 6, c.dim});

  // The text: Linear, tanh-GELU, Linear over all its rows, padding included.
  Value* text;
  {
    GraphBuilder::Scope embedder = b.scope("condition_embedder");
    GraphBuilder::Scope text_embedder = b.scope("text_embedder");
    text = n.linear(n.linear(context, "linear_1", "gelu_tanh"), "linear_2");
  }

  std::vector<float> cos, sin;
  wan_rope_tables(c.head_dim(), frames, rows, columns, cos, sin);
  Value* rope_cos = b.floats("rope_cos", {tokens, c.head_dim() / 2}, cos);
  Value* rope_sin = b.floats("rope_sin", {tokens, c.head_dim() / 2}, sin);
  Value* one = b.floats("one", {1}, {1.0f});
  auto frame_view = [&](Value* v) { return n.reshape(v, {views, plane, c.dim}); };
  auto modulated_norm = [&](Value* v, Value* scale, Value* shift) {
    return b.op(OpKind::kModulatedLayerNorm, {frame_view(v), scale, shift}, {{"epsilon", eps}});
  };

  for (int64_t layer = 0; layer < c.layers; ++layer) {
    GraphBuilder::Scope block = b.scope(fmt::format("blocks.{}", layer));
    const Modulation m = block_modulation(n, frame_projection, one);
    if (!b.ok()) return b.poison();
    {  // self-attention over every token, q and k normed across heads, then turned
      GraphBuilder::Scope attn = b.scope("attn1");
      Value* h = n.reshape(modulated_norm(x, m.scale1, m.shift1), {s.batch, tokens, c.dim});
      Value* q = b.op(OpKind::kRope, {n.rms_norm(n.linear(h, "to_q"), "norm_q", eps), rope_cos, rope_sin});
      Value* k = b.op(OpKind::kRope, {n.rms_norm(n.linear(h, "to_k"), "norm_k", eps), rope_cos, rope_sin});
      Value* a = n.attention(q, k, n.linear(h, "to_v"), c.heads, c.head_dim());
      // x + gate1 (a W + b), frame by frame.
      x = n.linear(frame_view(a), "to_out.0", "none", 1.0f, frame_view(x), m.gate1);
    }
    {  // cross-attention over all 512 text rows, ungated
      Value* h = n.reshape(n.layer_norm(x, "norm2", eps), {s.batch, tokens, c.dim});
      GraphBuilder::Scope attn = b.scope("attn2");
      Value* q = n.rms_norm(n.linear(h, "to_q"), "norm_q", eps);
      Value* k = n.rms_norm(n.linear(text, "to_k"), "norm_k", eps);
      Value* a = n.attention(q, k, n.linear(text, "to_v"), c.heads, c.head_dim());
      x = n.linear(a, "to_out.0", "none", 1.0f, n.reshape(x, {s.batch, tokens, c.dim}));
    }
    {  // the feed-forward, gated per frame
      GraphBuilder::Scope ffn = b.scope("ffn");
      Value* h = modulated_norm(x, m.scale2, m.shift2);
      h = n.linear(h, "net.0.proj", "gelu_tanh");
      x = n.linear(h, "net.2", "none", 1.0f, frame_view(x), m.gate2);
    }
  }

  // The head: modulated by the time embedding itself (not its projection).
  Value* head = n.add(frame_temb, n.param("scale_shift_table"));  // [B * F, 2, dim]: shift, scale
  const std::vector<Value*> shift_scale = b.ops(OpKind::kSplit, {head}, 2, {{"axis", int64_t(1)}}, "Split");
  if (!b.ok()) return b.poison();
  Value* out = n.linear(modulated_norm(x, n.add(shift_scale[1], one), shift_scale[0]), "proj_out");
  // Each token's [pt, ph, pw, C] back into place: [B, C, F pt, H ph, W pw].
  out = n.reshape(out, {s.batch, frames, rows, columns, c.patch_t, c.patch_h, c.patch_w, c.out_channels});
  out = n.transpose(out, {0, 7, 1, 4, 2, 5, 3, 6});
  return n.reshape(out, {s.batch, c.out_channels, s.frames, s.height, s.width});
}

Result<Graph> wan_transformer_graph(const WanTransformerConfig& config, const WeightSet& weights,
                                    const WanVideoShape& shape, bool first_frame_clean) {
  KILN_RETURN_IF_ERROR(wan_check_shape(config, shape));
  GraphBuilder b("wan_transformer");
  NetBuilder n(b, weights);
  Value* hidden =
      b.input("hidden_states", DType::kF32, {shape.batch, config.in_channels, shape.frames, shape.height, shape.width});
  Value* timestep = b.input("timestep", DType::kF32, {shape.batch});
  Value* context =
      b.input("encoder_hidden_states", DType::kF32, {shape.batch, Dim::named("text_rows"), config.text_dim});
  b.output(build_wan_transformer(n, config, shape, first_frame_clean, hidden, timestep, context), "sample");
  return std::move(b).finish();
}

}  // namespace kiln
