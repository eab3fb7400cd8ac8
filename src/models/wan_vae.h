// The Wan2.2 VAE (TI2V-5B: diffusers' AutoencoderKLWan with is_residual,
// Wan's wan/modules/vae2_2.py), built from its weights under diffusers'
// names (models/wan_names.h maps Wan's own): 48 latent channels, 4x16x16
// compression with a 2x2 pixel patchify built in, causal 3-D convolutions.
//
//   KILN_ASSIGN_OR_RETURN(WanVaeConfig config, wan_vae_config_from_weights(weights, mean, std));
//   KILN_ASSIGN_OR_RETURN(Graph encode, wan_vae_encoder_graph(config, weights, 704, 1280));
//   KILN_ASSIGN_OR_RETURN(WanVaeDecoder first, wan_vae_decoder_graph(config, weights, 44, 80, /*first=*/true));
//   KILN_ASSIGN_OR_RETURN(WanVaeDecoder next, wan_vae_decoder_graph(config, weights, 44, 80, /*first=*/false));
//
// Decoding streams one latent frame per call, as Wan does, so its memory is
// one chunk's whatever the frame count. Each causal convolution (3 frames
// deep) pads its input in front with the last 2 frames of its input in the
// previous call: its cache, a graph input ("cache.<module>") that the call
// also writes back ("next_cache.<module>", to be bound over it), all zeros
// before the first call. The first call (latent frame 0, one output frame)
// skips the temporal upsampling convolutions and the first frame of each
// block's duplicated shortcut; each later call turns one latent frame into
// 4 frames. Both graphs share every cache but the upsamplers' (read only
// from the second call on, zeros until then).
//
// Encoding covers what image-to-video needs: one frame, [1, 3, 1, H, W] in
// [-1, 1] -> its normalized latent mean [1, 48, 1, H/16, W/16].
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"
#include "models/weights.h"

namespace kiln {

struct WanVaeConfig {
  int64_t z_dim = 48, patch = 2;
  int64_t spatial_factor = 16, temporal_factor = 4;  // pixels and frames a latent cell covers
  std::vector<float> latents_mean, latents_std;      // z_dim each
  bool has_encoder = true;
};

// Wan2.2's 48 latent means and standard deviations (vae2_2.py, and the
// diffusers folder's vae/config.json): the defaults where no config gives them.
const std::vector<float>& wan22_latents_mean();
const std::vector<float>& wan22_latents_std();

// From the weights' shapes; `mean` and `std` from a config (Wan2.2's when
// empty). The levels' widths, resnets and samplers are read from the
// weights as the graphs are built.
Result<WanVaeConfig> wan_vae_config_from_weights(const WeightSet& weights, std::vector<float> mean,
                                                 std::vector<float> std);

// One frame to its latent: sample [1, 3, 1, height, width] -> latent.
Result<Graph> wan_vae_encoder_graph(const WanVaeConfig& config, const WeightSet& weights, int64_t height,
                                    int64_t width);

struct WanVaeCache {
  std::string input, output;  // "cache.<module>", "next_cache.<module>"
  Shape shape;                // [1, C, 2, h, w]
};
struct WanVaeDecoder {
  Graph graph;  // latent [1, z, 1, h, w] + caches -> frames [1, 3, T, 16 h, 16 w] in [-1, 1] + next caches
  std::vector<WanVaeCache> caches;  // in the order the convolutions run
  int64_t frames = 1;               // T: 1 for the first call, 4 after
};
Result<WanVaeDecoder> wan_vae_decoder_graph(const WanVaeConfig& config, const WeightSet& weights, int64_t latent_height,
                                            int64_t latent_width, bool first_chunk);

}  // namespace kiln
