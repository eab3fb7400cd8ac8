// Video generation as a library (Wan2.2 TI2V): a request in, a video file
// (or PNG frames) and what made it out. `kiln generate` with a Wan model is
// a thin caller of it.
//
//   KILN_ASSIGN_OR_RETURN(auto gen, VideoGenerator::open("Wan2.2-TI2V-5B-Diffusers", {}));
//   KILN_ASSIGN_OR_RETURN(VideoResult r, gen->generate({.prompt = "a cat", .frames = 17, .width = 256,
//                                                       .height = 256, .output = "cat.mp4"}));
//
// Without a seed a random one is drawn (and reported). The MP4's metadata
// (and each PNG frame's text) says what made it: the prompt, negative
// prompt, seed, steps, scheduler, guidance, size, frames, fps, the first
// frame's file and the model.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "pipeline/png.h"
#include "pipeline/video_pipeline.h"
#include "pipeline/video_writer.h"

namespace kiln {

struct VideoGenerationRequest {
  std::string prompt, negative_prompt;
  std::optional<uint64_t> seed;  // none: a random one
  int steps = 50;
  float guidance_scale = 5.0f;
  int64_t frames = 121;
  int64_t width = 0, height = 0;  // 0: Wan's 1280 x 704 (704 x 1280 for a portrait first frame)
  int fps = 24;
  std::string scheduler;                // empty: the model's (UniPC)
  std::optional<RgbImage> first_frame;  // image to video
  std::string first_frame_name;         // for the metadata
  std::string output;                   // an .mp4 to write
  std::string frames_dir;               // or a folder for PNG frames
};

struct VideoResult {
  VideoGeneration generation;
  uint64_t seed = 0;
  int64_t frames_written = 0;
  std::string written;  // the file or folder
  double seconds = 0;
};

struct VideoProgress {
  std::function<void(int, int)> step;             // (step index, steps)
  std::function<void(int64_t, int64_t)> decoded;  // (latent frames decoded, of how many)
  CancelCheck cancelled;                          // asked after each denoise step
};

class VideoGenerator {
 public:
  static Result<std::unique_ptr<VideoGenerator>> open(const std::string& model, const VideoPipelineOptions& options);
  Result<VideoResult> generate(const VideoGenerationRequest& request, const VideoProgress& progress = {});

  VideoPipeline& pipeline() { return *pipeline_; }
  const std::string& model_name() const { return model_name_; }

 private:
  VideoGenerator() = default;
  std::unique_ptr<VideoPipeline> pipeline_;
  std::string model_name_;
};

}  // namespace kiln
