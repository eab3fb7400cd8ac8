#include "models/wan_names.h"

#include <array>
#include <cctype>
#include <utility>

namespace kiln {

namespace {

using Rename = std::pair<std::string_view, std::string_view>;

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

// The first rename whose `from` prefixes `key`, applied; nullopt when none does.
template <size_t N>
std::optional<std::string> rename_prefix(std::string_view key, const std::array<Rename, N>& table) {
  for (const auto& [from, to] : table)
    if (starts_with(key, from)) return std::string(to) + std::string(key.substr(from.size()));
  return std::nullopt;
}

// "<prefix>N.<rest>": N and rest; nullopt when `key` is not so.
std::optional<std::pair<std::string, std::string_view>> split_index(std::string_view key, std::string_view prefix) {
  if (!starts_with(key, prefix)) return std::nullopt;
  key.remove_prefix(prefix.size());
  size_t digits = 0;
  while (digits < key.size() && std::isdigit(static_cast<unsigned char>(key[digits]))) ++digits;
  if (digits == 0 || digits >= key.size() || key[digits] != '.') return std::nullopt;
  return std::pair{std::string(key.substr(0, digits)), key.substr(digits + 1)};
}

constexpr std::array<Rename, 8> kTransformerTop = {{
    {"text_embedding.0.", "condition_embedder.text_embedder.linear_1."},
    {"text_embedding.2.", "condition_embedder.text_embedder.linear_2."},
    {"time_embedding.0.", "condition_embedder.time_embedder.linear_1."},
    {"time_embedding.2.", "condition_embedder.time_embedder.linear_2."},
    {"time_projection.1.", "condition_embedder.time_proj."},
    {"head.modulation", "scale_shift_table"},
    {"head.head.", "proj_out."},
    {"patch_embedding.", "patch_embedding."},
}};
constexpr std::array<Rename, 16> kTransformerBlock = {{
    {"modulation", "scale_shift_table"},
    {"self_attn.q.", "attn1.to_q."},
    {"self_attn.k.", "attn1.to_k."},
    {"self_attn.v.", "attn1.to_v."},
    {"self_attn.o.", "attn1.to_out.0."},
    {"self_attn.norm_q.", "attn1.norm_q."},
    {"self_attn.norm_k.", "attn1.norm_k."},
    {"cross_attn.q.", "attn2.to_q."},
    {"cross_attn.k.", "attn2.to_k."},
    {"cross_attn.v.", "attn2.to_v."},
    {"cross_attn.o.", "attn2.to_out.0."},
    {"cross_attn.norm_q.", "attn2.norm_q."},
    {"cross_attn.norm_k.", "attn2.norm_k."},
    {"norm3.", "norm2."},  // the cross-attention's affine norm; Wan's norm2 (the FFN's) has no parameters
    {"ffn.0.", "ffn.net.0.proj."},
    {"ffn.2.", "ffn.net.2."},
}};

constexpr std::array<Rename, 5> kUmt5Attention = {{
    {"attn.q.", "SelfAttention.q."},
    {"attn.k.", "SelfAttention.k."},
    {"attn.v.", "SelfAttention.v."},
    {"attn.o.", "SelfAttention.o."},
    {"pos_embedding.embedding.", "SelfAttention.relative_attention_bias."},
}};
constexpr std::array<Rename, 3> kUmt5Ffn = {{
    {"ffn.gate.0.", "DenseReluDense.wi_0."},
    {"ffn.fc1.", "DenseReluDense.wi_1."},
    {"ffn.fc2.", "DenseReluDense.wo."},
}};

// A residual block's parameters: residual.{0,2,3,6} and shortcut.
constexpr std::array<Rename, 5> kVaeResnet = {{
    {"residual.0.", "norm1."},
    {"residual.2.", "conv1."},
    {"residual.3.", "norm2."},
    {"residual.6.", "conv2."},
    {"shortcut.", "conv_shortcut."},
}};

// encoder.middle.{0,1,2} / decoder.middle.* as mid_block.{resnets.0, attentions.0, resnets.1}.
std::optional<std::string> vae_middle(std::string_view side, std::string_view rest) {
  const auto part = split_index(rest, "");
  if (!part) return std::nullopt;
  const std::string base = std::string(side) + ".mid_block.";
  if (part->first == "1") return base + "attentions.0." + std::string(part->second);
  const std::string resnet = part->first == "0" ? "resnets.0." : part->first == "2" ? "resnets.1." : "";
  if (resnet.empty()) return std::nullopt;
  auto r = rename_prefix(part->second, kVaeResnet);
  return r ? std::optional(base + resnet + *r) : std::nullopt;
}

// encoder.downsamples.i.downsamples.j.* / decoder.upsamples.i.upsamples.j.*: a
// residual block, or (resample / time_conv) the level's down- or upsampler.
std::optional<std::string> vae_level(std::string_view side, std::string_view kind, std::string_view rest) {
  const auto level = split_index(rest, "");
  if (!level) return std::nullopt;
  const auto item = split_index(level->second, std::string(kind) + "s.");
  if (!item) return std::nullopt;
  const std::string base =
      std::string(side) + (kind == "downsample" ? ".down_blocks." : ".up_blocks.") + level->first + ".";
  if (starts_with(item->second, "resample.") || starts_with(item->second, "time_conv."))
    return base + (kind == "downsample" ? "downsampler." : "upsampler.") + std::string(item->second);
  auto r = rename_prefix(item->second, kVaeResnet);
  return r ? std::optional(base + "resnets." + item->first + "." + *r) : std::nullopt;
}

}  // namespace

bool wan_transformer_keys_are_original(std::string_view key) {
  if (starts_with(key, "model.diffusion_model.")) return true;
  return key.find(".self_attn.") != std::string_view::npos || key.find(".cross_attn.") != std::string_view::npos ||
         starts_with(key, "head.") || starts_with(key, "time_embedding.") || starts_with(key, "text_embedding.");
}

std::optional<std::string> wan_transformer_name_from_original(std::string_view key) {
  if (starts_with(key, "model.diffusion_model.")) key.remove_prefix(std::string_view("model.diffusion_model.").size());
  if (const auto block = split_index(key, "blocks.")) {
    auto r = rename_prefix(block->second, kTransformerBlock);
    return r ? std::optional("blocks." + block->first + "." + *r) : std::nullopt;
  }
  return rename_prefix(key, kTransformerTop);
}

std::optional<std::string> umt5_name_from_original(std::string_view key) {
  if (key == "token_embedding.weight") return "shared.weight";
  if (key == "norm.weight") return "encoder.final_layer_norm.weight";
  const auto block = split_index(key, "blocks.");
  if (!block) return std::nullopt;
  const std::string base = "encoder.block." + block->first + ".";
  if (block->second == "norm1.weight") return base + "layer.0.layer_norm.weight";
  if (block->second == "norm2.weight") return base + "layer.1.layer_norm.weight";
  if (auto r = rename_prefix(block->second, kUmt5Attention)) return base + "layer.0." + *r;
  if (auto r = rename_prefix(block->second, kUmt5Ffn)) return base + "layer.1." + *r;
  return std::nullopt;
}

std::optional<std::string> umt5_name_from_hf(std::string_view key) {
  if (key == "encoder.embed_tokens.weight") return "shared.weight";
  if (key == "shared.weight" || key == "encoder.final_layer_norm.weight") return std::string(key);
  if (split_index(key, "encoder.block.")) return std::string(key);
  return std::nullopt;
}

std::optional<std::string> wan_vae_name_from_original(std::string_view key) {
  if (starts_with(key, "conv1.")) return "quant_conv." + std::string(key.substr(6));
  if (starts_with(key, "conv2.")) return "post_quant_conv." + std::string(key.substr(6));
  for (std::string_view side : {"encoder", "decoder"}) {
    if (!starts_with(key, side) || key.size() <= side.size() || key[side.size()] != '.') continue;
    const std::string_view rest = key.substr(side.size() + 1);
    const std::string s(side);
    if (starts_with(rest, "conv1.")) return s + ".conv_in." + std::string(rest.substr(6));
    if (starts_with(rest, "head.0.")) return s + ".norm_out." + std::string(rest.substr(7));
    if (starts_with(rest, "head.2.")) return s + ".conv_out." + std::string(rest.substr(7));
    if (starts_with(rest, "middle.")) return vae_middle(side, rest.substr(7));
    if (side == "encoder" && starts_with(rest, "downsamples.")) return vae_level(side, "downsample", rest.substr(12));
    if (side == "decoder" && starts_with(rest, "upsamples.")) return vae_level(side, "upsample", rest.substr(10));
  }
  return std::nullopt;
}

}  // namespace kiln
