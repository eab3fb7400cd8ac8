#include "models/sd_vae.h"

#include "models/net_builder.h"

namespace kiln {

namespace {

constexpr int64_t kMaxLevels = 8, kMaxLayersPerBlock = 8;

// The middle block: a resnet, one-head attention over the pixels, a resnet.
Value* mid_block(NetBuilder& n, const VaeConfig& c, Value* h) {
  GraphBuilder::Scope scope = n.b.scope("mid_block");
  h = n.resnet(h, nullptr, c.norm_groups, c.norm_eps, "resnets.0");
  {
    GraphBuilder::Scope attention = n.b.scope("attentions.0");
    const Tensor* q = n.tensor("to_q.weight");
    if (!q || q->rank() != 2) return n.b.fail(not_found("{}: the weight '{}' is missing or not [C, C]", n.w.label(),
                                                         n.param_name("to_q.weight")));
    const int64_t channels = q->shape()[0];
    Value* x = n.to_tokens(n.group_norm(h, "group_norm", c.norm_groups, c.norm_eps, false));
    Value* a = n.attention(n.linear(x, "to_q"), n.linear(x, "to_k"), n.linear(x, "to_v"), 1, channels);
    h = n.add(n.from_tokens(n.linear(a, "to_out.0"), h), h);
  }
  return n.resnet(h, nullptr, c.norm_groups, c.norm_eps, "resnets.1");
}

Value* norm_out(NetBuilder& n, const VaeConfig& c, Value* h) {
  return n.conv(n.group_norm(h, "conv_norm_out", c.norm_groups, c.norm_eps, true), "conv_out", {.pad = 1});
}

}  // namespace

Result<VaeConfig> vae_config_from_weights(const WeightSet& w) {
  VaeConfig c;
  c.has_encoder = w.contains("encoder.conv_in.weight");
  c.has_decoder = w.contains("decoder.conv_in.weight");
  if (!c.has_encoder && !c.has_decoder)
    return not_found("{}: neither encoder.conv_in.weight nor decoder.conv_in.weight (is this a VAE?)", w.label());
  const std::string side = c.has_encoder ? "encoder.down_blocks." : "decoder.up_blocks.";
  const int64_t levels = w.indexed_count(side);
  if (levels < 1 || levels > kMaxLevels)
    return invalid_argument("{}: {} levels under {} (1 to {})", w.label(), levels, side, kMaxLevels);
  c.block_out_channels.resize(size_t(levels));
  for (int64_t i = 0; i < levels; ++i) {
    // The decoder's up_blocks.i is the encoder's level levels - 1 - i.
    const std::string name = c.has_encoder ? fmt::format("encoder.down_blocks.{}.resnets.0.conv1.weight", i)
                                           : fmt::format("decoder.up_blocks.{}.resnets.0.conv1.weight", i);
    KILN_ASSIGN_OR_RETURN(Shape conv1, w.checked_shape(name, 4));
    c.block_out_channels[size_t(c.has_encoder ? i : levels - 1 - i)] = conv1[0];
  }
  c.layers_per_block = c.has_encoder ? w.indexed_count("encoder.down_blocks.0.resnets.")
                                     : w.indexed_count("decoder.up_blocks.0.resnets.") - 1;
  if (c.layers_per_block < 1 || c.layers_per_block > kMaxLayersPerBlock)
    return invalid_argument("{}: {} resnets a level (1 to {})", w.label(), c.layers_per_block, kMaxLayersPerBlock);
  if (c.has_decoder) {
    if (w.indexed_count("decoder.up_blocks.") != levels)
      return invalid_argument("{}: the encoder has {} levels and the decoder {}", w.label(), levels,
                              w.indexed_count("decoder.up_blocks."));
    KILN_ASSIGN_OR_RETURN(Shape post, w.checked_shape("post_quant_conv.weight", 4));
    KILN_ASSIGN_OR_RETURN(Shape out, w.checked_shape("decoder.conv_out.weight", 4));
    c.latent_channels = post[0];
    c.image_channels = out[0];
  }
  if (c.has_encoder) {
    KILN_ASSIGN_OR_RETURN(Shape quant, w.checked_shape("quant_conv.weight", 4));
    KILN_ASSIGN_OR_RETURN(Shape in, w.checked_shape("encoder.conv_in.weight", 4));
    if (c.has_decoder && quant[0] != 2 * c.latent_channels)
      return invalid_argument("{}: quant_conv makes {} channels, not twice the decoder's {} latent channels", w.label(),
                              quant[0], c.latent_channels);
    c.latent_channels = quant[0] / 2;
    c.image_channels = in[1];
  }
  return c;
}

Result<Graph> vae_decoder_graph(const VaeConfig& c, const WeightSet& weights) {
  if (!c.has_decoder) return not_found("{}: the checkpoint has no VAE decoder", weights.label());
  GraphBuilder b("vae_decoder");
  NetBuilder n(b, weights);
  Value* z = b.input("latent_sample", DType::kF32,
                     {Dim::named("batch"), c.latent_channels, Dim::named("height"), Dim::named("width")});
  Value* h = n.conv(z, "post_quant_conv");
  {
    GraphBuilder::Scope decoder = b.scope("decoder");
    h = mid_block(n, c, n.conv(h, "conv_in", {.pad = 1}));
    const int64_t levels = int64_t(c.block_out_channels.size());
    for (int64_t i = 0; i < levels; ++i) {
      GraphBuilder::Scope level = b.scope(fmt::format("up_blocks.{}", i));
      for (int64_t j = 0; j <= c.layers_per_block; ++j)
        h = n.resnet(h, nullptr, c.norm_groups, c.norm_eps, fmt::format("resnets.{}", j));
      if (i + 1 < levels) h = n.conv(n.upsample2x(h), "upsamplers.0.conv", {.pad = 1});
    }
    h = norm_out(n, c, h);
  }
  b.output(h, "sample");
  return std::move(b).finish();
}

Result<Graph> vae_encoder_graph(const VaeConfig& c, const WeightSet& weights) {
  if (!c.has_encoder) return not_found("{}: the checkpoint has no VAE encoder", weights.label());
  GraphBuilder b("vae_encoder");
  NetBuilder n(b, weights);
  Value* x = b.input("sample", DType::kF32, {Dim::named("batch"), c.image_channels, Dim::named("height"), Dim::named("width")});
  Value* h = nullptr;
  {
    GraphBuilder::Scope encoder = b.scope("encoder");
    h = n.conv(x, "conv_in", {.pad = 1});
    const int64_t levels = int64_t(c.block_out_channels.size());
    for (int64_t i = 0; i < levels; ++i) {
      GraphBuilder::Scope level = b.scope(fmt::format("down_blocks.{}", i));
      for (int64_t j = 0; j < c.layers_per_block; ++j)
        h = n.resnet(h, nullptr, c.norm_groups, c.norm_eps, fmt::format("resnets.{}", j));
      // Padded after each axis only, then a stride-2 3x3 conv (LDM's Downsample).
      if (i + 1 < levels) h = n.conv(h, "downsamplers.0.conv", {.stride = 2, .pad = 1, .pad_end_only = true});
    }
    h = norm_out(n, c, mid_block(n, c, h));
  }
  b.output(n.conv(h, "quant_conv"), "latent_parameters");
  return std::move(b).finish();
}

}  // namespace kiln
