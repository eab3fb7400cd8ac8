// Text to video (and image to video) with Wan2.2 TI2V-5B, from its diffusers
// folder or Wan's own (models/wan_model.h), one network in memory at a time:
//
//   KILN_ASSIGN_OR_RETURN(auto pipe, VideoPipeline::load("Wan2.2-TI2V-5B-Diffusers", {.whole_loop = true}));
//   KILN_ASSIGN_OR_RETURN(VideoGeneration g, pipe->generate({.prompt = "a cat", .frames = 17, .width = 256,
//                                                            .height = 256, .seed = 1},
//                                                           [&](const TensorView& frames) { return writer.add(frames);
//                                                           }));
//
// As Wan's pipelines do it (shared/reference/wan22-ti2v-5b.md, section 4):
//   1. the prompt and the negative prompt cleaned, tokenized (T5's
//      SentencePiece), encoded by UMT5 on their real tokens and zero-padded
//      to 512 rows: the context [negative, prompt]; the text encoder's
//      weights let go before the transformer's are mapped;
//   2. image to video: the first frame resized to cover the size and
//      centre-cropped, encoded by the VAE into latent frame 0;
//   3. latents [1, 48, (frames - 1) / 4 + 1, height / 16, width / 16] of
//      kiln's noise for the seed (frame 0 the image's latent, image to video);
//   4. `steps` steps of the transformer on [x, x] at the scheduler's
//      timestep (latent frame 0's tokens at 0, image to video), guidance
//      uncond + g (cond - uncond), the scheduler's update (UniPC, or flow
//      Euler), frame 0 put back to the image's latent after every step: the
//      whole loop as one plan (whole_loop), or a host loop over the
//      transformer;
//   5. the transformer let go, the latents decoded one latent frame at a
//      time (pipeline/video_decoder.h), each call's frames handed to the sink.
// The same seed gives the same frames in every mode.
#pragma once

#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <string>

#include "models/wan_model.h"
#include "pipeline/pipeline.h"
#include "pipeline/png.h"
#include "pipeline/video_decoder.h"

namespace kiln {

struct VideoPipelineOptions {
  ExecutionMode mode = ExecutionMode::kGraph;  // how each network runs
  bool whole_loop = true;                      // the denoise loop as one plan (see PipelineOptions)
  PassOptions passes;
  std::string variant;  // a diffusers folder's weights variant
  std::function<void(const std::string&)> log;
};

struct VideoRequest {
  std::string prompt, negative_prompt;
  uint64_t seed = 0;
  int steps = 50;
  float guidance_scale = 5.0f;
  int64_t frames = 121;                // 4 k + 1
  int64_t width = 1280, height = 704;  // multiples of 32
  std::string scheduler;               // empty: the folder's (UniPC); or "flow_euler"
  // Image to video: the first frame (resized to cover width x height, centre-cropped).
  const RgbImage* first_frame = nullptr;
  bool keep_trajectory = false;                      // keep the latents after every step
  std::function<void(int, int)> on_step;             // (step index, steps)
  std::function<void(int64_t, int64_t)> on_decoded;  // (latent frames decoded, of how many)
  CancelCheck cancelled;                             // asked after each step (pipeline.h)
};

struct VideoGeneration {
  Tensor latents;                  // [1, 48, F, h, w], normalized, as the VAE takes them
  std::vector<Tensor> trajectory;  // the latents after each step (keep_trajectory)
  std::string scheduler, mode;
  int64_t width = 0, height = 0, frames = 0;
  StageTimes times;
  int texts_encoded = 0;  // of the 2 (negative, prompt): the rest came from the text cache
  // Graph-loop only: heap allocations made while the loop's plan ran (the
  // step callbacks' included; -1 where the program has no counter) and the
  // bytes it copied out (0: the latents are bound in place).
  int64_t loop_heap_allocations = -1;
  size_t loop_output_copy_bytes = 0;
};

class VideoPipeline {
 public:
  // Opens the folder (every component checked, nothing mapped yet).
  static Result<std::unique_ptr<VideoPipeline>> load(const std::string& path, const VideoPipelineOptions& options);
  ~VideoPipeline();

  // Frames go to `sink` as [1, 3, T, height, width] in [-1, 1], in order;
  // without a sink the latents are not decoded.
  Result<VideoGeneration> generate(const VideoRequest& request, const VideoDecoder::FrameSink& sink);

  const WanFolder& folder() const { return folder_; }
  // The scheduler a request asking for `name` gets (empty: the folder's).
  std::string scheduler_name(const std::string& name) const;
  std::string description() const;

 private:
  VideoPipeline() = default;
  // `texts_encoded`: how many of the two ran the text encoder (the rest were cached).
  Result<Tensor> encode_prompts(const VideoRequest& r, StageTimes& times, int& texts_encoded);
  Result<Tensor> encode_first_frame(const VideoRequest& r, StageTimes& times);
  Status denoise(const VideoRequest& r, const StepTables& tables, const Tensor& context, const Tensor* first_latent,
                 const WanNetwork<WanTransformerConfig>& dit, Tensor& x, VideoGeneration& g);
  Status denoise_host_loop(const VideoRequest& r, const StepTables& tables, const Tensor& context,
                           const Tensor* first_latent, const WanNetwork<WanTransformerConfig>& dit, Tensor& x,
                           VideoGeneration& g);
  Status denoise_whole_loop(const VideoRequest& r, const StepTables& tables, const Tensor& context,
                            const Tensor* first_latent, const WanNetwork<WanTransformerConfig>& dit, Tensor& x,
                            VideoGeneration& g);

  WanFolder folder_;
  VideoPipelineOptions options_;
  SchedulerConfig scheduler_;
  // The text encoder's 512 rows for the texts it encoded last (cleaned
  // prompts, newest last): a repeated prompt, and the negative prompt a
  // server sends with every request, skip UMT5 and mapping its weights.
  static constexpr size_t kTextCacheEntries = 8;
  std::list<std::pair<std::string, Tensor>> text_cache_;
};

// An image resized to cover width x height (Lanczos, through libswscale) and
// centre-cropped to it, as Wan prepares an image-to-video first frame.
Result<RgbImage> resize_to_cover(const RgbImage& image, int64_t width, int64_t height);

}  // namespace kiln
