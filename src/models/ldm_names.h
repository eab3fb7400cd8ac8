// The key layouts of single-file ("original LDM") Stable Diffusion
// checkpoints, mapped to the canonical names models/ builds from: diffusers'
// for the UNet and the VAE, Hugging Face transformers' for text encoders.
// Facts and sources: shared/reference/sd-checkpoints.md, sections A.2-A.5.
//
//   UNet  input_blocks.{i}.{0,1}, middle_block.{0,1,2}, output_blocks.{i}.{0,1,2},
//         time_embed.{0,2}, out.{0,2}, and resnets' in_layers / emb_layers /
//         out_layers / skip_connection   ->   down_blocks, mid_block, up_blocks, ...
//   VAE   {encoder,decoder}.{down,up}.{i}.block.{j}, mid.{block_1,attn_1,block_2},
//         norm_out, nin_shortcut; decoder.up.{i} counts from the bottom (reversed);
//         the mid attention's q/k/v/proj_out are 1x1 convolutions (viewed as Linear weights)
//   CLIP  Hugging Face's layout (SD 1.x), old files without "text_model."
//   OpenCLIP (SD 2.x)  transformer.resblocks.{n}.{ln_1, attn.in_proj (Q, K, V packed), attn.out_proj,
//         ln_2, mlp.c_fc, mlp.c_proj}, ln_final, positional_embedding -> Hugging Face's names,
//         Q, K and V viewed as row slices of the packed tensor (no copy)
//
// Each function takes keys without the component's file prefix
// ("model.diffusion_model.", "first_stage_model.", ...).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "models/weights.h"

namespace kiln {

// What a UNet's keys say about its block numbering: input block i >= 1 is
// level (i - 1) / (layers_per_block + 1), the last slot of a level its
// downsampler.
struct LdmUnetLayout {
  int64_t layers_per_block = 2;
  int64_t middle_blocks = 3;  // resnet, attention, resnet (2 without the attention)
};
LdmUnetLayout ldm_unet_layout(const std::vector<std::string>& keys);
// The diffusers name of LDM UNet key `key`; nullopt for a key that is no
// UNet parameter.
std::optional<std::string> unet_name_from_ldm(std::string_view key, const LdmUnetLayout& layout);

// The LDM key of diffusers UNet weight `name` (unet_name_from_ldm's
// inverse; without "model.diffusion_model."): what kohya's SDXL LoRAs name
// their modules by. `up_attends[i]`: whether up_blocks.i has attentions (its
// upsampler then follows them, slot 2); layout.middle_blocks places the
// middle block's second resnet.
// nullopt for a name that is no UNet weight's.
std::optional<std::string> ldm_name_from_unet(std::string_view name, const LdmUnetLayout& layout,
                                              const std::vector<bool>& up_attends);

// decoder.up.{i} is up_blocks.{decoder_levels - 1 - i}.
struct LdmVaeLayout {
  int64_t decoder_levels = 4;
};
LdmVaeLayout ldm_vae_layout(const std::vector<std::string>& keys);
std::optional<std::string> vae_name_from_ldm(std::string_view key, const LdmVaeLayout& layout);
// Old diffusers names of the VAE's mid attention (query, key, value,
// proj_attn) as today's (to_q, to_k, to_v, to_out.0); other names unchanged.
std::string vae_name_from_old_diffusers(std::string_view key);

// Hugging Face CLIP text keys with "text_model." in front where old files
// (and transformers >= 5) leave it out; nullopt for position_ids, a buffer.
std::optional<std::string> clip_name_from_hf(std::string_view key);

// Adds OpenCLIP text-tower tensors to `out` under Hugging Face's names;
// each one's origin is `origin_prefix` + its key. text_projection ([in,
// out], SDXL's pooled output) is kept under its own name.
Status add_open_clip_weights(const std::vector<std::pair<std::string, Tensor>>& tensors,
                             const std::string& origin_prefix, WeightSet& out);

}  // namespace kiln
