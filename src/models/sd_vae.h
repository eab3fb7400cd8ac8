// The Stable Diffusion VAE (diffusers' AutoencoderKL, LDM's
// AutoencoderKL), built from its weights under diffusers' names: the
// encoder (for image to image) and the decoder.
//
//   KILN_ASSIGN_OR_RETURN(VaeConfig config, vae_config_from_weights(weights));
//   KILN_ASSIGN_OR_RETURN(Graph decoder, vae_decoder_graph(config, weights));
//
//   decoder  latent_sample [batch, latent, height, width] -> sample [batch, 3, f height, f width]
//            (post_quant_conv, then the decoder; f = 2^(levels - 1))
//   encoder  sample [batch, 3, height, width] -> latent_parameters [batch, 2 latent, height / f, width / f]
//            (the encoder, then quant_conv: the latent distribution's mean and log-variance)
//
// The levels, their widths and the resnets a level are read from the
// weights' shapes; GroupNorms have 32 groups, as every SD VAE.
#pragma once

#include <vector>

#include "ir/graph.h"
#include "models/weights.h"

namespace kiln {

struct VaeConfig {
  int64_t image_channels = 3, latent_channels = 4;
  std::vector<int64_t> block_out_channels;  // the encoder's levels, widest last
  int64_t layers_per_block = 2;             // encoder resnets a level (the decoder has one more)
  bool has_encoder = false, has_decoder = false;
  int64_t norm_groups = 32;
  float norm_eps = 1e-6f;
  float scaling_factor = 0.18215f;  // latents = z * scaling_factor (config.json; the family's otherwise)
  int64_t sample_size = 512;        // the image size it was trained at: tiled decoding's tile

  int64_t factor() const { return int64_t(1) << (block_out_channels.size() - 1); }
};

Result<VaeConfig> vae_config_from_weights(const WeightSet& weights);
Result<Graph> vae_decoder_graph(const VaeConfig& config, const WeightSet& weights);
Result<Graph> vae_encoder_graph(const VaeConfig& config, const WeightSet& weights);

}  // namespace kiln
