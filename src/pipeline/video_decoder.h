// Latents to video frames through the Wan2.2 VAE, streamed: one latent frame
// per call (models/wan_vae.h), each call's frames handed on as soon as they
// exist, so memory is one call's whatever the clip's length. The causal
// caches live in buffers of their own, bound in place as both input and
// output of every call (zeros before the first).
//
//   KILN_ASSIGN_OR_RETURN(auto decoder, VideoDecoder::create(vae->config, vae->weights, 16, 16, options));
//   KILN_RETURN_IF_ERROR(decoder->decode(latents, [&](const TensorView& frames) {   // [1, 3, T, H, W] in [-1, 1]
//     return writer.add(frames);
//   }));
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "models/wan_vae.h"
#include "runtime/eager_executor.h"
#include "runtime/model_runner.h"

namespace kiln {

class VideoDecoder {
 public:
  using FrameSink = std::function<Status(const TensorView& frames)>;
  // After each latent frame: how many are done, of how many.
  using Progress = std::function<void(int64_t done, int64_t total)>;

  // Graph mode compiles a plan for the first call and one for the others
  // (when there are others); eager mode runs their graphs node by node.
  static Result<std::unique_ptr<VideoDecoder>> create(const WanVaeConfig& config, const WeightSet& weights,
                                                      int64_t latent_height, int64_t latent_width,
                                                      const RunnerOptions& options);
  ~VideoDecoder();

  // latents [1, z, F, h, w], normalized as the transformer makes them.
  Status decode(const Tensor& latents, const FrameSink& frames, const Progress& progress = {});
  // Gives the plans' arenas back to the system while the decoder sits idle.
  void release_memory();

 private:
  struct Call;  // one of the two graphs, compiled or eager
  VideoDecoder() = default;
  Status run(Call& call, const Tensor& latent, const FrameSink& frames);

  const WanVaeConfig* config_ = nullptr;
  const WeightSet* weights_ = nullptr;
  int64_t height_ = 0, width_ = 0;
  RunnerOptions options_;
  std::unique_ptr<Call> first_, next_;
  std::vector<Tensor> caches_;  // one per cache name, in name order
  std::vector<std::string> cache_names_;
};

}  // namespace kiln
