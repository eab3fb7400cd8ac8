// The original key layouts of Wan2.2's networks (Wan-Video/Wan2.2's own
// checkpoints and Comfy-Org's repacks of them), mapped to the canonical names
// models/ builds from: diffusers' for the transformer and the VAE, Hugging
// Face transformers' UMT5EncoderModel for the text encoder. Facts and
// sources: shared/reference/wan22-ti2v-5b.md, sections 1.8, 2 and 3.3.
//
//   transformer  patch_embedding, text_embedding.{0,2}, time_embedding.{0,2}, time_projection.1,
//                blocks.N.{modulation, self_attn.{q,k,v,o,norm_q,norm_k}, norm3 (the cross-attention's
//                affine norm: diffusers' norm2), cross_attn.*, ffn.{0,2}}, head.{modulation,head};
//                Comfy's files add model.diffusion_model. in front
//   UMT5         token_embedding, blocks.N.{norm1, attn.{q,k,v,o}, pos_embedding.embedding, norm2,
//                ffn.{gate.0, fc1, fc2}}, norm
//   VAE          {encoder.downsamples, decoder.upsamples}.i.{down,up}samples.j.{residual.{0,2,3,6},
//                shortcut, resample.1, time_conv}, {encoder,decoder}.middle.{0,1,2},
//                {encoder,decoder}.head.{0,2}, conv1 / conv2 (quant and post-quant), encoder.conv1 /
//                decoder.conv1 (conv_in)
//
// Each returns nullopt for a key that is no parameter of that network.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace kiln {

// Whether transformer keys are in the original layout (blocks.0.self_attn.q.weight).
bool wan_transformer_keys_are_original(std::string_view any_block_key);
std::optional<std::string> wan_transformer_name_from_original(std::string_view key);

std::optional<std::string> umt5_name_from_original(std::string_view key);
// Hugging Face UMT5 names as the builder reads them: encoder.embed_tokens
// (which some files hold instead of shared) as shared.
std::optional<std::string> umt5_name_from_hf(std::string_view key);

std::optional<std::string> wan_vae_name_from_original(std::string_view key);

}  // namespace kiln
