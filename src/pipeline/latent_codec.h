// The image's side of a pipeline: the VAE that decodes latents into a
// picture (in blended tiles for large ones, as diffusers'
// enable_vae_tiling) and encodes a picture into latents for image to image.
//
//   LatentCodec codec(std::move(decoder_runner), encoder_loader, runner_options, {.factor = 8, ...});
//   KILN_ASSIGN_OR_RETURN(Tensor image, codec.decode(latents, /*tiled=*/false));   // [B, 3, 8h, 8w] in [-1, 1]
#pragma once

#include <memory>
#include <string>

#include "core/rng.h"
#include "pipeline/png.h"
#include "runtime/model_runner.h"

namespace kiln {

class LatentCodec {
 public:
  struct Spec {
    std::string label;           // errors name it
    int64_t latent_channels = 4;
    int64_t factor = 8;          // image pixels per latent, each way
    int64_t tile = 512;          // tiled decoding's tile, pixels (the VAE's own image size)
    float scaling_factor = 0.18215f;  // latents = z * scaling_factor
  };

  // `decoder` maps latent_sample [B, C, h, w] to sample [B, 3, f h, f w];
  // `encoder` (loaded by the first encode(); null: no image to image) maps
  // sample to the latent distribution [B, 2C, h, w] (mean, log-variance)
  // or a drawn latent [B, C, h, w].
  LatentCodec(std::unique_ptr<ModelRunner> decoder, ModelRunner::GraphLoader encoder, RunnerOptions runner_options,
              Spec spec)
      : decoder_(std::move(decoder)), encoder_loader_(std::move(encoder)),
        runner_options_(std::move(runner_options)), spec_(std::move(spec)) {}

  // The image's latents x0 = scaling_factor (mean + std eps), eps the next
  // draws of `noise`, for each of `batch` copies.
  Result<Tensor> encode(const RgbImage& image, int64_t batch, NoiseStream& noise);
  // latents -> [B, 3, H, W] in [-1, 1], in tiles when `tiled`.
  Result<Tensor> decode(const Tensor& latents, bool tiled);

  const Spec& spec() const { return spec_; }

 private:
  Result<Tensor> decode_whole(const Tensor& z);  // z: latents / scaling_factor
  Result<Tensor> decode_tiled(const Tensor& z);

  std::unique_ptr<ModelRunner> decoder_, encoder_;
  ModelRunner::GraphLoader encoder_loader_;
  RunnerOptions runner_options_;
  Spec spec_;
};

// [B, 3, H, W] in [-1, 1] to B images of H x W x RGB bytes, as diffusers
// does: (v / 2 + 0.5) clamped, times 255, rounded half to even.
std::vector<uint8_t> image_to_pixels(const Tensor& image);
// The same for one image's `pixels` values a channel, channel_stride apart
// (a video frame's planes), into pixels x RGB bytes.
void planes_to_rgb(const float* values, int64_t pixels, int64_t channel_stride, uint8_t* rgb);

}  // namespace kiln
