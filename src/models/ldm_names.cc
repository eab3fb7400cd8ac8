#include "models/ldm_names.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

namespace kiln {

namespace {

// If s is "<prefix><N>.<rest>", sets *index = N, s = rest and returns true.
bool take_index(std::string_view& s, std::string_view prefix, int64_t* index) {
  if (!s.starts_with(prefix)) return false;
  size_t i = prefix.size();
  int64_t n = 0;
  const size_t first = i;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])) && i - first < 6) n = n * 10 + (s[i++] - '0');
  if (i == first || i >= s.size() || s[i] != '.') return false;
  *index = n;
  s.remove_prefix(i + 1);
  return true;
}

bool take(std::string_view& s, std::string_view prefix) {
  if (!s.starts_with(prefix)) return false;
  s.remove_prefix(prefix.size());
  return true;
}

std::string cat(std::string_view a, std::string_view b) { return std::string(a) + std::string(b); }

// A UNet resnet's inner names (LDM's ResBlock -> diffusers' ResnetBlock2D).
std::optional<std::string> unet_resnet_name(std::string_view rest) {
  static constexpr std::pair<std::string_view, std::string_view> kNames[] = {
      {"in_layers.0.", "norm1."},        {"in_layers.2.", "conv1."},  {"emb_layers.1.", "time_emb_proj."},
      {"out_layers.0.", "norm2."},       {"out_layers.3.", "conv2."}, {"skip_connection.", "conv_shortcut."}};
  for (const auto& [ldm, diffusers] : kNames)
    if (take(rest, ldm)) return cat(diffusers, rest);
  return std::nullopt;
}

bool is_unet_resnet(std::string_view rest) { return unet_resnet_name(rest).has_value(); }

// A VAE resnet's inner names: the same but the skip's.
std::string vae_resnet_name(std::string_view rest) {
  return take(rest, "nin_shortcut.") ? cat("conv_shortcut.", rest) : std::string(rest);
}

// The VAE's mid attention: LDM's 1x1 conv names and diffusers' old Linear ones.
std::optional<std::string> vae_attention_name(std::string_view rest) {
  static constexpr std::pair<std::string_view, std::string_view> kNames[] = {
      {"norm.", "group_norm."}, {"q.", "to_q."},         {"k.", "to_k."},         {"v.", "to_v."},
      {"proj_out.", "to_out.0."}, {"query.", "to_q."},   {"key.", "to_k."},       {"value.", "to_v."},
      {"proj_attn.", "to_out.0."}};
  for (const auto& [from, to] : kNames)
    if (take(rest, from)) return cat(to, rest);
  return std::nullopt;
}

}  // namespace

LdmUnetLayout ldm_unet_layout(const std::vector<std::string>& keys) {
  LdmUnetLayout layout;
  int64_t input_blocks = 0, first_downsampler = -1, middle = 0;
  for (const std::string& key : keys) {
    std::string_view s = key;
    int64_t i = 0, j = 0;
    if (take_index(s, "input_blocks.", &i)) {
      input_blocks = std::max(input_blocks, i + 1);
      if (take_index(s, "", &j) && j == 0 && s.starts_with("op.") && (first_downsampler < 0 || i < first_downsampler))
        first_downsampler = i;
    } else if (take_index(s, "middle_block.", &i)) {
      middle = std::max(middle, i + 1);
    }
  }
  // Blocks 1..lpb are level 0's, block lpb + 1 its downsampler.
  layout.layers_per_block = first_downsampler > 0 ? first_downsampler - 1 : std::max<int64_t>(input_blocks - 1, 1);
  layout.middle_blocks = middle;
  return layout;
}

std::optional<std::string> unet_name_from_ldm(std::string_view key, const LdmUnetLayout& layout) {
  std::string_view s = key;
  const int64_t per_level = layout.layers_per_block + 1;
  int64_t i = 0, j = 0;
  if (take(s, "time_embed.0.")) return cat("time_embedding.linear_1.", s);
  if (take(s, "time_embed.2.")) return cat("time_embedding.linear_2.", s);
  if (take(s, "label_emb.0.0.")) return cat("add_embedding.linear_1.", s);
  if (take(s, "label_emb.0.2.")) return cat("add_embedding.linear_2.", s);
  if (take(s, "out.0.")) return cat("conv_norm_out.", s);
  if (take(s, "out.2.")) return cat("conv_out.", s);
  if (take_index(s, "input_blocks.", &i) && take_index(s, "", &j)) {
    if (i == 0) return j == 0 ? std::optional(cat("conv_in.", s)) : std::nullopt;
    const int64_t level = (i - 1) / per_level, slot = (i - 1) % per_level;
    if (slot == layout.layers_per_block)
      return j == 0 && take(s, "op.") ? std::optional(fmt::format("down_blocks.{}.downsamplers.0.conv.{}", level, s))
                                      : std::nullopt;
    if (j == 0) {
      auto inner = unet_resnet_name(s);
      return inner ? std::optional(fmt::format("down_blocks.{}.resnets.{}.{}", level, slot, *inner)) : std::nullopt;
    }
    return j == 1 ? std::optional(fmt::format("down_blocks.{}.attentions.{}.{}", level, slot, s)) : std::nullopt;
  }
  s = key;
  if (take_index(s, "middle_block.", &j)) {
    // resnet, [attention,] resnet
    if (j == 0 || j == layout.middle_blocks - 1) {
      auto inner = unet_resnet_name(s);
      return inner ? std::optional(fmt::format("mid_block.resnets.{}.{}", j == 0 ? 0 : 1, *inner)) : std::nullopt;
    }
    return j == 1 && !is_unet_resnet(s) ? std::optional(cat("mid_block.attentions.0.", s)) : std::nullopt;
  }
  s = key;
  if (take_index(s, "output_blocks.", &i) && take_index(s, "", &j)) {
    const int64_t level = i / per_level, slot = i % per_level;
    if (j == 0) {
      auto inner = unet_resnet_name(s);
      return inner ? std::optional(fmt::format("up_blocks.{}.resnets.{}.{}", level, slot, *inner)) : std::nullopt;
    }
    // An upsampler follows the resnet (and the attention, where there is one).
    if (take(s, "conv.")) return fmt::format("up_blocks.{}.upsamplers.0.conv.{}", level, s);
    return j == 1 ? std::optional(fmt::format("up_blocks.{}.attentions.{}.{}", level, slot, s)) : std::nullopt;
  }
  return std::nullopt;
}

std::optional<std::string> ldm_name_from_unet(std::string_view name, const LdmUnetLayout& layout,
                                              const std::vector<bool>& up_attends) {
  static constexpr std::pair<std::string_view, std::string_view> kTop[] = {
      {"conv_in.", "input_blocks.0.0."},       {"time_embedding.linear_1.", "time_embed.0."},
      {"time_embedding.linear_2.", "time_embed.2."}, {"add_embedding.linear_1.", "label_emb.0.0."},
      {"add_embedding.linear_2.", "label_emb.0.2."}, {"conv_norm_out.", "out.0."},
      {"conv_out.", "out.2."}};
  static constexpr std::pair<std::string_view, std::string_view> kResnet[] = {
      {"norm1.", "in_layers.0."},  {"conv1.", "in_layers.2."},  {"time_emb_proj.", "emb_layers.1."},
      {"norm2.", "out_layers.0."}, {"conv2.", "out_layers.3."}, {"conv_shortcut.", "skip_connection."}};
  auto resnet = [](std::string_view rest) -> std::optional<std::string> {
    for (const auto& [diffusers, ldm] : kResnet)
      if (take(rest, diffusers)) return cat(ldm, rest);
    return std::nullopt;
  };
  std::string_view s = name;
  for (const auto& [diffusers, ldm] : kTop)
    if (take(s, diffusers)) return cat(ldm, s);
  const int64_t per_level = layout.layers_per_block + 1;
  int64_t i = 0, j = 0;
  for (const bool down : {true, false}) {
    s = name;
    if (!take_index(s, down ? "down_blocks." : "up_blocks.", &i)) continue;
    const std::string_view blocks = down ? "input_blocks" : "output_blocks";
    const int64_t first = down ? 1 + i * per_level : i * per_level;
    if (take_index(s, "resnets.", &j)) {
      auto inner = resnet(s);
      return inner ? std::optional(fmt::format("{}.{}.0.{}", blocks, first + j, *inner)) : std::nullopt;
    }
    if (take_index(s, "attentions.", &j)) return fmt::format("{}.{}.1.{}", blocks, first + j, s);
    if (down && take(s, "downsamplers.0.conv."))
      return fmt::format("input_blocks.{}.0.op.{}", first + layout.layers_per_block, s);
    if (!down && take(s, "upsamplers.0.conv.")) {
      const bool attends = i < int64_t(up_attends.size()) && up_attends[size_t(i)];
      return fmt::format("output_blocks.{}.{}.conv.{}", first + layout.layers_per_block, attends ? 2 : 1, s);
    }
    return std::nullopt;
  }
  s = name;
  if (take(s, "mid_block.attentions.0.")) return cat("middle_block.1.", s);
  if (take_index(s, "mid_block.resnets.", &j) && (j == 0 || j == 1)) {
    auto inner = resnet(s);
    if (!inner) return std::nullopt;
    return fmt::format("middle_block.{}.{}", j == 0 ? 0 : layout.middle_blocks - 1, *inner);
  }
  return std::nullopt;
}

LdmVaeLayout ldm_vae_layout(const std::vector<std::string>& keys) {
  LdmVaeLayout layout{0};
  for (const std::string& key : keys) {
    std::string_view s = key;
    int64_t i = 0;
    if (take_index(s, "decoder.up.", &i)) layout.decoder_levels = std::max(layout.decoder_levels, i + 1);
  }
  return layout;
}

std::optional<std::string> vae_name_from_ldm(std::string_view key, const LdmVaeLayout& layout) {
  std::string_view s = key;
  for (std::string_view pass : {"quant_conv.", "post_quant_conv."})
    if (s.starts_with(pass)) return std::string(s);
  std::string side;
  if (take(s, "encoder.")) side = "encoder.";
  else if (take(s, "decoder.")) side = "decoder.";
  else return std::nullopt;
  int64_t i = 0, j = 0;
  if (take(s, "conv_in.") || take(s, "conv_out.")) return std::string(key);
  if (take(s, "norm_out.")) return cat(side + "conv_norm_out.", s);
  if (take(s, "mid.block_1.")) return cat(side + "mid_block.resnets.0.", vae_resnet_name(s));
  if (take(s, "mid.block_2.")) return cat(side + "mid_block.resnets.1.", vae_resnet_name(s));
  if (take(s, "mid.attn_1.")) {
    auto inner = vae_attention_name(s);
    return inner ? std::optional(cat(side + "mid_block.attentions.0.", *inner)) : std::nullopt;
  }
  if (side == "encoder." && take_index(s, "down.", &i)) {
    if (take_index(s, "block.", &j)) return fmt::format("encoder.down_blocks.{}.resnets.{}.{}", i, j, vae_resnet_name(s));
    if (take(s, "downsample.conv.")) return fmt::format("encoder.down_blocks.{}.downsamplers.0.conv.{}", i, s);
    return std::nullopt;
  }
  if (side == "decoder." && take_index(s, "up.", &i) && i < layout.decoder_levels) {
    const int64_t level = layout.decoder_levels - 1 - i;  // LDM counts from the bottom
    if (take_index(s, "block.", &j)) return fmt::format("decoder.up_blocks.{}.resnets.{}.{}", level, j, vae_resnet_name(s));
    if (take(s, "upsample.conv.")) return fmt::format("decoder.up_blocks.{}.upsamplers.0.conv.{}", level, s);
  }
  return std::nullopt;
}

std::string vae_name_from_old_diffusers(std::string_view key) {
  const std::string_view marker = "mid_block.attentions.0.";
  const size_t at = key.find(marker);
  if (at == std::string_view::npos) return std::string(key);
  std::string_view rest = key.substr(at + marker.size());
  for (std::string_view old : {"query.", "key.", "value.", "proj_attn."})
    if (rest.starts_with(old)) return cat(key.substr(0, at + marker.size()), *vae_attention_name(rest));
  return std::string(key);
}

std::optional<std::string> clip_name_from_hf(std::string_view key) {
  if (key.ends_with("position_ids")) return std::nullopt;
  if (key.starts_with("text_model.")) return std::string(key);
  for (std::string_view part : {"embeddings.", "encoder.", "final_layer_norm."})
    if (key.starts_with(part)) return cat("text_model.", key);
  if (key.starts_with("text_projection.")) return std::string(key);  // CLIPTextModelWithProjection's
  return std::nullopt;
}

Status add_open_clip_weights(const std::vector<std::pair<std::string, Tensor>>& tensors,
                             const std::string& origin_prefix, WeightSet& out) {
  static constexpr std::pair<std::string_view, std::string_view> kNames[] = {
      {"ln_1.", "layer_norm1."}, {"ln_2.", "layer_norm2."}, {"attn.out_proj.", "self_attn.out_proj."},
      {"mlp.c_fc.", "mlp.fc1."}, {"mlp.c_proj.", "mlp.fc2."}};
  for (const auto& [key, t] : tensors) {
    const std::string where = origin_prefix + key;
    std::string_view s = key;
    int64_t n = 0;
    if (s == "token_embedding.weight") {
      KILN_RETURN_IF_ERROR(out.add("text_model.embeddings.token_embedding.weight", t, where));
    } else if (s == "positional_embedding") {
      KILN_RETURN_IF_ERROR(out.add("text_model.embeddings.position_embedding.weight", t, where));
    } else if (take(s, "ln_final.")) {
      KILN_RETURN_IF_ERROR(out.add(cat("text_model.final_layer_norm.", s), t, where));
    } else if (s == "text_projection") {
      KILN_RETURN_IF_ERROR(out.add("text_projection", t, where));
    } else if (take_index(s, "transformer.resblocks.", &n)) {
      const std::string layer = fmt::format("text_model.encoder.layers.{}.", n);
      if (s == "attn.in_proj_weight" || s == "attn.in_proj_bias") {
        // Rows [0, D) are Q, [D, 2D) K, [2D, 3D) V.
        if (t.rank() < 1 || t.shape()[0] % 3 != 0)
          return invalid_argument("{}: a packed Q, K, V projection needs 3 x D rows, got shape {}", where,
                                  shape_to_string(t.shape()));
        const int64_t d = t.shape()[0] / 3;
        const char* kind = s == "attn.in_proj_weight" ? "weight" : "bias";
        for (int64_t p = 0; p < 3; ++p)
          KILN_RETURN_IF_ERROR(
              out.add(fmt::format("{}self_attn.{}_proj.{}", layer, "qkv"[p], kind), t.rows(p * d, d), where));
        continue;
      }
      bool mapped = false;
      for (const auto& [from, to] : kNames)
        if (take(s, from)) {
          KILN_RETURN_IF_ERROR(out.add(layer + cat(to, s), t, where));
          mapped = true;
          break;
        }
      if (!mapped) KILN_RETURN_IF_ERROR(out.add(key, t, where));  // kept, reported unused
    } else {
      KILN_RETURN_IF_ERROR(out.add(key, t, where));  // kept, reported unused
    }
  }
  return ok_status();
}

}  // namespace kiln
