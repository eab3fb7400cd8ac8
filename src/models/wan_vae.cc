#include "models/wan_vae.h"

#include <fmt/format.h>

#include <limits>

#include "models/net_builder.h"

namespace kiln {

namespace {

using Ints = std::vector<int64_t>;

// Wan's channel norm is F.normalize (x / max(|x|, 1e-12)) times sqrt(C):
// x / sqrt(mean(x^2) + eps) with eps = 1e-24 / C, the same clamp.
float channel_norm_eps(int64_t channels) { return float(1e-24 / double(channels)); }

Shape dims_of(const Value* v) {
  Shape s;
  if (v->shape)
    for (const Dim& d : *v->shape) s.push_back(d.value);
  return s;
}

// The VAE's modules over one call's frames. Causal convolutions read their
// cache (graph inputs, when `cached`) or zero padding (the encoder's one frame).
class VaeBuilder {
 public:
  VaeBuilder(NetBuilder& n, bool first_chunk, bool cached) : n(n), b(n.b), first_(first_chunk), cached_(cached) {}

  NetBuilder& n;
  GraphBuilder& b;
  std::vector<WanVaeCache> caches;

  // A convolution whose frames look back kt - 1 frames: [cache | x] (or
  // zeros in front), `pad` on each side of H and W.
  Value* causal_conv(Value* x, std::string_view module, int64_t pad, Value* residual = nullptr) {
    const Tensor* w = n.tensor(std::string(module) + ".weight");
    if (!b.ok()) return b.poison();
    if (!w || w->shape().size() != 5)
      return b.fail(invalid_argument("{}: '{}' is missing or no 3-D convolution's weight", n.w.label(),
                                     n.param_name(std::string(module) + ".weight")));
    if (!video(x)) return b.poison();
    const int64_t back = w->shape()[2] - 1;
    if (back == 0 || !cached_) return n.conv(x, module, {.pad = pad, .residual = residual, .pad_front = back});
    const std::string path = n.param_name(module);
    Shape cache_shape = dims_of(x);
    cache_shape[2] = back;
    Value* cache = b.input("cache." + path, DType::kF32, sym_shape_from(cache_shape));
    Value* input = n.concat({cache, x}, 2);
    Value* next = b.op(OpKind::kSlice, {input, b.ints("starts", {-back}),
                                        b.ints("ends", {std::numeric_limits<int64_t>::max()}), b.ints("axes", {2})});
    b.output(next, "next_cache." + path);
    caches.push_back({"cache." + path, "next_cache." + path, cache_shape});
    return n.conv(input, module, {.pad = pad, .residual = residual});
  }

  Value* norm(Value* x, std::string_view module, bool silu) {
    if (!video(x)) return b.poison();
    const Shape d = dims_of(x);
    return n.rms_norm(x, module, channel_norm_eps(d.empty() ? 1 : d[1]), 1, silu, "gamma");
  }

  // RMS, SiLU, conv; RMS, SiLU, conv; plus x (through a 1x1x1 conv where the width changes).
  Value* resnet(Value* x, std::string_view module) {
    GraphBuilder::Scope scope = b.scope(module);
    Value* skip = n.has("conv_shortcut") ? n.conv(x, "conv_shortcut") : x;
    Value* h = causal_conv(norm(x, "norm1", true), "conv1", 1);
    return causal_conv(norm(h, "norm2", true), "conv2", 1, skip);
  }

  // Single-head attention over each frame's positions.
  Value* attention(Value* x, std::string_view module) {
    if (!video(x)) return b.poison();
    GraphBuilder::Scope scope = b.scope(module);
    const Shape d = dims_of(x);  // [1, C, T, H, W]
    const int64_t c = d[1], t = d[2], plane = d[3] * d[4];
    auto tokens = [&](Value* v) { return n.transpose(n.reshape(v, {c, t, plane}), {1, 2, 0}); };  // [T, HW, C]
    Value* qkv = n.linear(tokens(norm(x, "norm", false)), "to_qkv");
    const std::vector<Value*> parts = b.ops(OpKind::kSplit, {qkv}, 3, {{"axis", int64_t(2)}}, "Split");
    if (!b.ok()) return b.poison();
    Value* y = n.linear(n.attention(parts[0], parts[1], parts[2], 1, c), "proj", "none", 1.0f, tokens(x));
    return n.reshape(n.transpose(y, {2, 0, 1}), d);
  }

  Value* mid(Value* x, std::string_view module) {
    GraphBuilder::Scope scope = b.scope(module);
    x = resnet(x, "resnets.0");
    x = attention(x, "attentions.0");
    return resnet(x, "resnets.1");
  }

  // [1, C, T, H, W] -> [1, C ft fs fs, T/ft, H/fs, W/fs], channel c ft fs fs + it fs fs + ih fs + iw.
  Value* space_time_to_channels(Value* x, int64_t ft, int64_t fs) {
    if (!video(x)) return b.poison();
    const Shape d = dims_of(x);
    x = n.reshape(x, {1, d[1], d[2] / ft, ft, d[3] / fs, fs, d[4] / fs, fs});
    x = n.transpose(x, {0, 1, 3, 5, 7, 2, 4, 6});
    return n.reshape(x, {1, d[1] * ft * fs * fs, d[2] / ft, d[3] / fs, d[4] / fs});
  }

  // Wan2.2's down-block shortcut: time padded in front to whole factors,
  // (ft, fs, fs) moved into channels, groups of channels averaged.
  Value* avg_down(Value* x, int64_t out_channels, int64_t ft, int64_t fs) {
    if (!video(x)) return b.poison();
    Shape d = dims_of(x);
    if (d[2] % ft != 0) {
      const int64_t front = ft - d[2] % ft;
      x = b.op(OpKind::kPad, {x, b.ints("pads", {0, 0, front, 0, 0, 0, 0, 0, 0, 0})});
      d[2] += front;
    }
    x = space_time_to_channels(x, ft, fs);
    if (out_channels < 1 || d[1] * ft * fs * fs % out_channels != 0)
      return b.fail(invalid_argument("{}: {} channels do not average into {}", n.w.label(), d[1] * ft * fs * fs,
                                     out_channels));
    const int64_t group = d[1] * ft * fs * fs / out_channels;
    if (group == 1) return x;
    x = n.reshape(x, {1, out_channels, group, d[2] / ft, d[3] / fs, d[4] / fs});
    return b.op(OpKind::kReduceMean, {x, b.ints("axes", {2})}, {{"keepdims", int64_t(0)}});
  }

  // Wan2.2's up-block shortcut: each channel repeated, the copies moved
  // into (ft, fs, fs); the first call drops the first ft - 1 frames.
  Value* dup_up(Value* x, int64_t out_channels, int64_t ft, int64_t fs) {
    if (!video(x)) return b.poison();
    const Shape d = dims_of(x);
    if (out_channels * ft * fs * fs % d[1] != 0)
      return b.fail(invalid_argument("{}: {} channels do not repeat into {}", n.w.label(), d[1], out_channels));
    const int64_t repeats = out_channels * ft * fs * fs / d[1], cells = d[2] * d[3] * d[4];
    x = b.op(OpKind::kExpand, {n.reshape(x, {1, d[1], 1, cells}), b.ints("shape", {1, d[1], repeats, cells})});
    x = n.reshape(x, {1, out_channels, ft, fs, fs, d[2], d[3], d[4]});
    x = n.transpose(x, {0, 1, 5, 2, 6, 3, 7, 4});
    x = n.reshape(x, {1, out_channels, d[2] * ft, d[3] * fs, d[4] * fs});
    if (!first_ || ft == 1) return x;
    return b.op(OpKind::kSlice, {x, b.ints("starts", {ft - 1}), b.ints("ends", {std::numeric_limits<int64_t>::max()}),
                                 b.ints("axes", {2})});
  }

  // Spatial x2 down per frame (pad right and bottom, 3x3 stride 2); the
  // temporal half (time_conv) never runs on a first call, the only one the
  // encoder makes.
  Value* downsample(Value* x, std::string_view module) {
    GraphBuilder::Scope scope = b.scope(module);
    return n.conv(x, "resample.1", {.stride = 2, .pad = 1, .pad_end_only = true, .per_frame = true});
  }

  // The temporal x2 (time_conv to 2C channels, halves interleaved as frames
  // 2t and 2t+1; not on the first call), then nearest x2 and a 3x3 conv per frame.
  Value* upsample(Value* x, std::string_view module, bool temporal) {
    GraphBuilder::Scope scope = b.scope(module);
    if (temporal && !first_) {
      if (!video(x)) return b.poison();
      const Shape d = dims_of(x);
      x = causal_conv(x, "time_conv", 0);
      x = n.transpose(n.reshape(x, {1, 2, d[1], d[2], d[3], d[4]}), {0, 2, 3, 1, 4, 5});
      x = n.reshape(x, {1, d[1], 2 * d[2], d[3], d[4]});
    }
    x = b.op(OpKind::kResize, {x, nullptr, b.floats("scales", {5}, {1.0f, 1.0f, 1.0f, 2.0f, 2.0f})},
             {{"mode", std::string("nearest")},
              {"coordinate_transformation_mode", std::string("asymmetric")},
              {"nearest_mode", std::string("floor")}});
    return n.conv(x, "resample.1", {.pad = 1, .per_frame = true});
  }

  // The output width of the level in scope (its first resnet's); an error
  // when it has none.
  int64_t level_width() {
    const std::string name = n.param_name("resnets.0.conv1.weight");
    const std::optional<Shape> s = n.w.shape_of(name);
    if (s && s->size() == 5 && (*s)[0] > 0) return (*s)[0];
    b.fail(not_found("{}: the weight '{}' is missing or no 3-D convolution's", n.w.label(), name));
    return 0;
  }

 private:
  // Whether x is a video [N, C, T, H, W] of known sizes (the builder's first
  // error leaves none: the methods then add nothing).
  bool video(const Value* x) const {
    if (!b.ok() || !x->shape || x->shape->size() != 5) return false;
    for (const Dim& d : *x->shape)
      if (!d.known()) return false;
    return true;
  }

  bool first_, cached_;
};

Status check_pixels(const WanVaeConfig& c, int64_t height, int64_t width) {
  if (height < c.spatial_factor || width < c.spatial_factor || height % c.spatial_factor != 0 ||
      width % c.spatial_factor != 0 || height * width > (int64_t(1) << 26))
    return invalid_argument("{} x {} pixels are no whole {}-pixel latent cells", height, width, c.spatial_factor);
  return ok_status();
}

// The latents' per-channel constants as [1, z, 1, 1, 1].
Value* channel_constant(GraphBuilder& b, std::string_view name, const std::vector<float>& values) {
  return b.floats(name, {1, int64_t(values.size()), 1, 1, 1}, values);
}

}  // namespace

const std::vector<float>& wan22_latents_mean() {
  static const std::vector<float> mean = {-0.2289f, -0.0052f, -0.1323f, -0.2339f, -0.2799f, 0.0174f,  0.1838f,
                                          0.1557f,  -0.1382f, 0.0542f,  0.2813f,  0.0891f,  0.1570f,  -0.0098f,
                                          0.0375f,  -0.1825f, -0.2246f, -0.1207f, -0.0698f, 0.5109f,  0.2665f,
                                          -0.2108f, -0.2158f, 0.2502f,  -0.2055f, -0.0322f, 0.1109f,  0.1567f,
                                          -0.0729f, 0.0899f,  -0.2799f, -0.1230f, -0.0313f, -0.1649f, 0.0117f,
                                          0.0723f,  -0.2839f, -0.2083f, -0.0520f, 0.3748f,  0.0152f,  0.1957f,
                                          0.1433f,  -0.2944f, 0.3573f,  -0.0548f, -0.1681f, -0.0667f};
  return mean;
}

const std::vector<float>& wan22_latents_std() {
  static const std::vector<float> std = {0.4765f, 1.0364f, 0.4514f, 1.1677f, 0.5313f, 0.4990f, 0.4818f, 0.5013f,
                                         0.8158f, 1.0344f, 0.5894f, 1.0901f, 0.6885f, 0.6165f, 0.8454f, 0.4978f,
                                         0.5759f, 0.3523f, 0.7135f, 0.6804f, 0.5833f, 1.4146f, 0.8986f, 0.5659f,
                                         0.7069f, 0.5338f, 0.4889f, 0.4917f, 0.4069f, 0.4999f, 0.6866f, 0.4093f,
                                         0.5709f, 0.6065f, 0.6415f, 0.4944f, 0.5726f, 1.2042f, 0.5458f, 1.6887f,
                                         0.3971f, 1.0600f, 0.3943f, 0.5537f, 0.5444f, 0.4089f, 0.7468f, 0.7744f};
  return std;
}

Result<WanVaeConfig> wan_vae_config_from_weights(const WeightSet& w, std::vector<float> mean, std::vector<float> std) {
  WanVaeConfig c;
  KILN_ASSIGN_OR_RETURN(const Shape post, w.checked_shape("post_quant_conv.weight", 5));
  c.z_dim = post[0];
  KILN_ASSIGN_OR_RETURN(const Shape out, w.checked_shape("decoder.conv_out.weight", 5));
  if (out[0] % 3 != 0) return invalid_argument("{}: decoder.conv_out has {} outputs, not 3 p^2", w.label(), out[0]);
  c.patch = 1;
  while (c.patch * c.patch * 3 < out[0]) ++c.patch;
  if (c.patch * c.patch * 3 != out[0])
    return invalid_argument("{}: decoder.conv_out's {} outputs are no RGB patch", w.label(), out[0]);
  const int64_t levels = w.indexed_count("decoder.up_blocks.");
  if (levels < 1) return invalid_argument("{}: no decoder levels (decoder.up_blocks.0...)", w.label());
  c.spatial_factor = c.patch, c.temporal_factor = 1;
  for (int64_t i = 0; i < levels; ++i) {
    const std::string up = fmt::format("decoder.up_blocks.{}.upsampler.", i);
    if (!w.names_with_prefix(up + "resample.").empty()) c.spatial_factor *= 2;
    if (!w.names_with_prefix(up + "time_conv.").empty()) c.temporal_factor *= 2;
  }
  c.has_encoder = !w.names_with_prefix("encoder.").empty();
  if (mean.empty()) mean = wan22_latents_mean();
  if (std.empty()) std = wan22_latents_std();
  if (int64_t(mean.size()) != c.z_dim || int64_t(std.size()) != c.z_dim)
    return invalid_argument("{}: {} latent channels but {} means and {} standard deviations", w.label(), c.z_dim,
                            mean.size(), std.size());
  for (float s : std)
    if (!(s > 0)) return invalid_argument("{}: a latent standard deviation of {}", w.label(), s);
  c.latents_mean = std::move(mean), c.latents_std = std::move(std);
  return c;
}

Result<Graph> wan_vae_encoder_graph(const WanVaeConfig& c, const WeightSet& weights, int64_t height, int64_t width) {
  if (!c.has_encoder) return invalid_argument("{}: this VAE has no encoder weights", weights.label());
  KILN_RETURN_IF_ERROR(check_pixels(c, height, width));
  GraphBuilder b("vae_encoder");
  NetBuilder n(b, weights);
  VaeBuilder v(n, /*first_chunk=*/true, /*cached=*/false);
  const int64_t p = c.patch;
  Value* sample = b.input("sample", DType::kF32, {1, 3, 1, height, width});
  // 2x2 patchify: channel c p p + r p + q (r the column offset, q the row offset).
  Value* x = n.reshape(sample, {1, 3, 1, height / p, p, width / p, p});
  x = n.reshape(n.transpose(x, {0, 1, 6, 4, 2, 3, 5}), {1, 3 * p * p, 1, height / p, width / p});
  {
    GraphBuilder::Scope encoder = b.scope("encoder");
    x = v.causal_conv(x, "conv_in", 1);
    const int64_t levels = weights.indexed_count("encoder.down_blocks.");
    for (int64_t i = 0; i < levels; ++i) {
      const std::string level = fmt::format("down_blocks.{}", i);
      GraphBuilder::Scope scope = b.scope(level);
      const bool spatial = n.has("downsampler.resample.1"), temporal = n.has("downsampler.time_conv");
      const int64_t width_out = v.level_width(), resnets = weights.indexed_count(n.param_name("resnets."));
      if (!b.ok()) break;
      Value* shortcut = v.avg_down(x, width_out, temporal ? 2 : 1, spatial ? 2 : 1);
      for (int64_t r = 0; r < resnets; ++r) x = v.resnet(x, fmt::format("resnets.{}", r));
      if (spatial) x = v.downsample(x, "downsampler");
      x = n.add(x, shortcut);
    }
    x = v.mid(x, "mid_block");
    x = v.causal_conv(v.norm(x, "norm_out", true), "conv_out", 1);
  }
  x = n.conv(x, "quant_conv");
  // The mean's half; the log-variance's is unused.
  x = b.op(OpKind::kSlice, {x, b.ints("starts", {0}), b.ints("ends", {c.z_dim}), b.ints("axes", {1})});
  std::vector<float> inv_std;
  for (float s : c.latents_std) inv_std.push_back(1.0f / s);  // Wan scales by 1 / std in f32
  x = n.mul(b.op(OpKind::kSub, {x, channel_constant(b, "latents_mean", c.latents_mean)}),
            channel_constant(b, "latents_inv_std", inv_std));
  b.output(x, "latent");
  return std::move(b).finish();
}

Result<WanVaeDecoder> wan_vae_decoder_graph(const WanVaeConfig& c, const WeightSet& weights, int64_t latent_height,
                                            int64_t latent_width, bool first_chunk) {
  KILN_RETURN_IF_ERROR(check_pixels(c, latent_height * c.spatial_factor, latent_width * c.spatial_factor));
  GraphBuilder b(first_chunk ? "vae_decoder_first" : "vae_decoder");
  NetBuilder n(b, weights);
  VaeBuilder v(n, first_chunk, /*cached=*/true);
  Value* z = b.input("latent", DType::kF32, {1, c.z_dim, 1, latent_height, latent_width});
  std::vector<float> inv_std;
  for (float s : c.latents_std) inv_std.push_back(1.0f / s);
  Value* x = b.op(OpKind::kDiv, {z, channel_constant(b, "latents_inv_std", inv_std)});
  x = n.add(x, channel_constant(b, "latents_mean", c.latents_mean));
  x = n.conv(x, "post_quant_conv");
  {
    GraphBuilder::Scope decoder = b.scope("decoder");
    x = v.causal_conv(x, "conv_in", 1);
    x = v.mid(x, "mid_block");
    const int64_t levels = weights.indexed_count("decoder.up_blocks.");
    for (int64_t i = 0; i < levels; ++i) {
      GraphBuilder::Scope scope = b.scope(fmt::format("up_blocks.{}", i));
      const bool spatial = n.has("upsampler.resample.1"), temporal = n.has("upsampler.time_conv");
      const int64_t width_out = v.level_width(), resnets = weights.indexed_count(n.param_name("resnets."));
      if (!b.ok()) break;
      Value* shortcut = spatial ? v.dup_up(x, width_out, temporal ? 2 : 1, 2) : nullptr;
      for (int64_t r = 0; r < resnets; ++r) x = v.resnet(x, fmt::format("resnets.{}", r));
      if (spatial) x = n.add(v.upsample(x, "upsampler", temporal), shortcut);
    }
    x = v.causal_conv(v.norm(x, "norm_out", true), "conv_out", 1);
  }
  // Unpatchify [1, 3 p p, T, h, w] -> [1, 3, T, h p, w p], then clamp.
  const Shape d = dims_of(x);
  const int64_t p = c.patch;
  if (b.ok() && d.size() == 5) {
    x = n.reshape(x, {1, 3, p, p, d[2], d[3], d[4]});
    x = n.reshape(n.transpose(x, {0, 1, 4, 5, 3, 6, 2}), {1, 3, d[2], d[3] * p, d[4] * p});
  }
  x = b.op(OpKind::kClip, {x, b.floats("low", {}, {-1.0f}), b.floats("high", {}, {1.0f})});
  b.output(x, "frames");
  WanVaeDecoder out;
  out.caches = std::move(v.caches);
  out.frames = d.size() == 5 ? d[2] : 0;
  KILN_ASSIGN_OR_RETURN(out.graph, std::move(b).finish());
  return out;
}

}  // namespace kiln
