#include "models/sd_unet.h"

#include <cmath>

namespace kiln {

namespace {

// Sizes past these are no UNet anyone trained: a hostile file, not a model.
constexpr int64_t kMaxLevels = 8, kMaxLayersPerBlock = 8, kMaxDepth = 64;

// diffusers' Attention: projections of x (queries) and of the context
// (keys, values), heads of head_dim, out projection plus the residual.
Value* attention(NetBuilder& n, Value* x, Value* context, int64_t heads, int64_t head_dim, Value* residual,
                 bool upcast, std::string_view module) {
  GraphBuilder::Scope scope = n.b.scope(module);
  Value* a = n.attention(n.linear(x, "to_q"), n.linear(context, "to_k"), n.linear(context, "to_v"), heads, head_dim,
                         nullptr, upcast);
  return n.linear(a, "to_out.0", "none", 1.0f, residual);
}

// diffusers' BasicTransformerBlock: self-attention, cross-attention to the
// context, a GEGLU feed-forward, each after a LayerNorm, each residual.
Value* transformer_block(NetBuilder& n, const SdUnetConfig& c, Value* x, Value* context, int64_t heads,
                         int64_t head_dim, std::string_view module) {
  GraphBuilder::Scope scope = n.b.scope(module);
  Value* h = n.layer_norm(x, "norm1", 1e-5f);
  x = attention(n, h, h, heads, head_dim, x, c.upcast_attention, "attn1");
  h = n.layer_norm(x, "norm2", 1e-5f);
  x = attention(n, h, context, heads, head_dim, x, c.upcast_attention, "attn2");
  h = n.layer_norm(x, "norm3", 1e-5f);
  h = n.b.op(OpKind::kGeglu, {n.linear(h, "ff.net.0.proj")});  // value * gelu(gate), halves of one projection
  return n.linear(h, "ff.net.2", "none", 1.0f, x);
}

// diffusers' Transformer2DModel over the image's pixels as tokens.
Value* transformer(NetBuilder& n, const SdUnetConfig& c, Value* x, Value* context, int64_t heads, int64_t depth,
                   std::string_view module) {
  GraphBuilder::Scope scope = n.b.scope(module);
  const Tensor* norm = n.tensor("norm.weight");
  if (!norm || norm->rank() != 1) return n.b.fail(not_found("{}: the weight '{}' is missing or not [C]", n.w.label(),
                                                            n.param_name("norm.weight")));
  const int64_t channels = norm->shape()[0];
  if (heads < 1 || channels % heads)
    return n.b.fail(invalid_argument("{}: {} channels do not split into {} attention heads", n.w.label(), channels,
                                     heads));
  Value* h = n.group_norm(x, "norm", c.norm_groups, 1e-6f, false);
  h = c.linear_projection ? n.linear(n.to_tokens(h), "proj_in") : n.to_tokens(n.conv(h, "proj_in"));
  for (int64_t k = 0; k < depth; ++k)
    h = transformer_block(n, c, h, context, heads, channels / heads, fmt::format("transformer_blocks.{}", k));
  if (c.linear_projection) return n.add(n.from_tokens(n.linear(h, "proj_out"), x), x);
  return n.conv(n.from_tokens(h, x), "proj_out", {.residual = x});
}

}  // namespace

Value* timestep_embedding(NetBuilder& n, Value* t, int64_t dim) {
  const int64_t half = dim / 2;
  std::vector<float> freqs(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) freqs[size_t(i)] = float(std::exp(-std::log(10000.0) * double(i) / double(half)));
  Value* args = n.mul(n.reshape(t, {-1, 1}), n.b.floats("freqs", {half}, freqs));
  return n.concat({n.b.op(OpKind::kCos, {args}), n.b.op(OpKind::kSin, {args})}, 1);
}

Result<SdUnetConfig> sd_unet_config_from_weights(const WeightSet& w) {
  SdUnetConfig c;
  KILN_ASSIGN_OR_RETURN(Shape conv_in, w.checked_shape("conv_in.weight", 4));
  KILN_ASSIGN_OR_RETURN(Shape conv_out, w.checked_shape("conv_out.weight", 4));
  KILN_ASSIGN_OR_RETURN(Shape time, w.checked_shape("time_embedding.linear_1.weight", 2));
  c.in_channels = conv_in[1];
  c.out_channels = conv_out[0];
  c.time_embed_dim = time[0];
  const int64_t levels = w.indexed_count("down_blocks."), up_levels = w.indexed_count("up_blocks.");
  if (levels < 1 || levels > kMaxLevels || up_levels != levels)
    return invalid_argument("{}: {} down and {} up levels; a UNet has as many of each (1 to {})", w.label(), levels,
                            up_levels, kMaxLevels);
  c.layers_per_block = w.indexed_count("down_blocks.0.resnets.");
  if (c.layers_per_block < 1 || c.layers_per_block > kMaxLayersPerBlock)
    return invalid_argument("{}: down_blocks.0 has {} resnets (1 to {})", w.label(), c.layers_per_block,
                            kMaxLayersPerBlock);
  std::string attention;  // the first transformer block's prefix: its shapes give the context and proj_in
  for (int64_t i = 0; i < levels; ++i) {
    const std::string down = fmt::format("down_blocks.{}.", i), up = fmt::format("up_blocks.{}.", i);
    KILN_ASSIGN_OR_RETURN(Shape conv1, w.checked_shape(down + "resnets.0.conv1.weight", 4));
    c.block_out_channels.push_back(conv1[0]);
    c.down_depth.push_back(w.indexed_count(down + "attentions.0.transformer_blocks."));
    c.up_depth.push_back(w.indexed_count(up + "attentions.0.transformer_blocks."));
    if (w.indexed_count(down + "resnets.") != c.layers_per_block || w.indexed_count(up + "resnets.") != c.layers_per_block + 1)
      return invalid_argument("{}: level {} has {} down and {} up resnets, expected {} and {}", w.label(), i,
                              w.indexed_count(down + "resnets."), w.indexed_count(up + "resnets."),
                              c.layers_per_block, c.layers_per_block + 1);
    if (attention.empty() && c.down_depth.back()) attention = down + "attentions.0.";
  }
  if (w.contains("add_embedding.linear_1.weight")) {
    // SDXL: add_embedding takes the pooled text and 6 time ids, each embedded
    // 256 wide (every SDXL's; a folder's config.json may say otherwise).
    KILN_ASSIGN_OR_RETURN(Shape add, w.checked_shape("add_embedding.linear_1.weight", 2));
    c.addition_time_embed_dim = 256;
    c.text_embeds_dim = add[1] - 6 * c.addition_time_embed_dim;
    if (c.text_embeds_dim < 1)
      return invalid_argument("{}: add_embedding.linear_1 takes {} inputs, fewer than 6 time ids of {} and a text",
                              w.label(), add[1], c.addition_time_embed_dim);
  }
  if (w.contains("time_embedding.cond_proj.weight")) {  // LCM: the guidance embedded
    KILN_ASSIGN_OR_RETURN(Shape cond, w.checked_shape("time_embedding.cond_proj.weight", 2));
    if (cond[1] < 2 || cond[1] % 2)
      return invalid_argument("{}: time_embedding.cond_proj takes {} inputs; an embedded guidance is an even width",
                              w.label(), cond[1]);
    c.time_cond_proj_dim = cond[1];
  }
  c.mid_depth = w.indexed_count("mid_block.attentions.0.transformer_blocks.");
  if (attention.empty() && c.mid_depth) attention = "mid_block.attentions.0.";
  for (int64_t d : c.down_depth)
    if (d > kMaxDepth) return invalid_argument("{}: {} transformer blocks in one attention", w.label(), d);
  if (!attention.empty()) {
    KILN_ASSIGN_OR_RETURN(Shape to_k, w.checked_shape(attention + "transformer_blocks.0.attn2.to_k.weight", 2));
    c.context_dim = to_k[1];
    std::optional<Shape> proj_in = w.shape_of(attention + "proj_in.weight");
    if (!proj_in || (proj_in->size() != 2 && proj_in->size() != 4))
      return invalid_argument("{}: '{}' must be a Linear [C, C] or 1x1 convolution [C, C, 1, 1] weight", w.label(),
                              attention + "proj_in.weight");
    c.linear_projection = proj_in->size() == 2;
  }
  return c;
}

std::vector<int64_t> sd_unet_heads(const SdUnetConfig& c, int64_t heads, int64_t head_dim) {
  std::vector<int64_t> out;
  for (int64_t channels : c.block_out_channels) out.push_back(head_dim > 0 ? channels / head_dim : heads);
  return out;
}

Value* build_sd_unet(NetBuilder& n, const SdUnetConfig& c, const SdUnetInputs& in) {
  const int64_t levels = c.levels();
  if (levels < 1 || int64_t(c.heads.size()) != levels)
    return n.b.fail(invalid_argument("{}: the UNet config has {} levels and {} head counts", n.w.label(), levels,
                                     c.heads.size()));
  if (bool(c.addition_time_embed_dim) != (in.text_embeds && in.time_ids))
    return n.b.fail(invalid_argument("{}: SDXL's UNet takes text_embeds and time_ids, the others neither",
                                     n.w.label()));
  if (bool(c.time_cond_proj_dim) != bool(in.timestep_cond))
    return n.b.fail(invalid_argument("{}: an LCM UNet takes timestep_cond (its guidance), the others do not",
                                     n.w.label()));
  Value *sample = in.sample, *context = in.context, *text_embeds = in.text_embeds, *time_ids = in.time_ids;
  Value* temb = timestep_embedding(n, in.timestep, c.block_out_channels[0]);
  if (in.timestep_cond) temb = n.linear(in.timestep_cond, "time_embedding.cond_proj", "none", 1.0f, temb);
  temb = n.linear(temb, "time_embedding.linear_1", "swish");
  temb = n.linear(temb, "time_embedding.linear_2");
  if (c.addition_time_embed_dim) {
    // SDXL: + add_embedding(text_embeds ++ the time ids' embeddings, flattened).
    Value* ids = timestep_embedding(n, n.reshape(time_ids, {-1}), c.addition_time_embed_dim);
    Value* added = n.concat({text_embeds, n.reshape(ids, {-1, 6 * c.addition_time_embed_dim})}, 1);
    added = n.linear(added, "add_embedding.linear_1", "swish");
    temb = n.linear(added, "add_embedding.linear_2", "none", 1.0f, temb);
  }
  Value* temb_silu = n.silu(temb);  // every resnet reads SiLU(temb)

  Value* h = n.conv(sample, "conv_in", {.pad = 1});
  std::vector<Value*> skips = {h};
  for (int64_t i = 0; i < levels; ++i) {
    GraphBuilder::Scope level = n.b.scope(fmt::format("down_blocks.{}", i));
    for (int64_t j = 0; j < c.layers_per_block; ++j) {
      h = n.resnet(h, temb_silu, c.norm_groups, c.norm_eps, fmt::format("resnets.{}", j));
      if (c.down_depth[size_t(i)])
        h = transformer(n, c, h, context, c.heads[size_t(i)], c.down_depth[size_t(i)], fmt::format("attentions.{}", j));
      skips.push_back(h);
    }
    if (i + 1 < levels) {
      h = n.conv(h, "downsamplers.0.conv", {.stride = 2, .pad = 1});
      skips.push_back(h);
    }
  }
  {
    GraphBuilder::Scope mid = n.b.scope("mid_block");
    h = n.resnet(h, temb_silu, c.norm_groups, c.norm_eps, "resnets.0");
    if (c.mid_depth) h = transformer(n, c, h, context, c.heads.back(), c.mid_depth, "attentions.0");
    h = n.resnet(h, temb_silu, c.norm_groups, c.norm_eps, "resnets.1");
  }
  for (int64_t i = 0; i < levels; ++i) {
    GraphBuilder::Scope level = n.b.scope(fmt::format("up_blocks.{}", i));
    const size_t mirrored = size_t(levels - 1 - i);  // the down level at the same resolution
    for (int64_t j = 0; j <= c.layers_per_block; ++j) {
      if (skips.empty()) return n.b.fail(internal_error("the UNet's up path has more resnets than skips"));
      h = n.concat({h, skips.back()}, 1);
      skips.pop_back();
      h = n.resnet(h, temb_silu, c.norm_groups, c.norm_eps, fmt::format("resnets.{}", j));
      if (c.up_depth[size_t(i)])
        h = transformer(n, c, h, context, c.heads[mirrored], c.up_depth[size_t(i)], fmt::format("attentions.{}", j));
    }
    if (i + 1 < levels) h = n.conv(n.upsample2x(h), "upsamplers.0.conv", {.pad = 1});
  }
  h = n.group_norm(h, "conv_norm_out", c.norm_groups, c.norm_eps, true);
  return n.conv(h, "conv_out", {.pad = 1});
}

Result<Graph> sd_unet_graph(const SdUnetConfig& c, const WeightSet& weights) {
  GraphBuilder b("unet");
  NetBuilder n(b, weights);
  Value* sample = b.input("sample", DType::kF32, {Dim::named("batch"), c.in_channels, Dim::named("height"), Dim::named("width")});
  Value* timestep = b.input("timestep", DType::kF32, {Dim::named("batch")});
  Value* context = b.input("encoder_hidden_states", DType::kF32, {Dim::named("batch"), Dim::named("sequence"), c.context_dim});
  SdUnetInputs in{.sample = sample, .timestep = timestep, .context = context};
  if (c.addition_time_embed_dim) {
    in.text_embeds = b.input("text_embeds", DType::kF32, {Dim::named("batch"), c.text_embeds_dim});
    in.time_ids = b.input("time_ids", DType::kF32, {Dim::named("batch"), 6});
  }
  if (c.time_cond_proj_dim)
    in.timestep_cond = b.input("timestep_cond", DType::kF32, {Dim::named("batch"), c.time_cond_proj_dim});
  b.output(build_sd_unet(n, c, in), "out_sample");
  return std::move(b).finish();
}

}  // namespace kiln
