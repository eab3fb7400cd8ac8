#include "app/video_generator.h"

#include <fmt/format.h>

#include <chrono>
#include <random>

#include "app/generator.h"

namespace kiln {

namespace {

// What made the video: an A1111-style parameters line (the "comment") and
// one key a field.
VideoMetadata metadata(const VideoGenerationRequest& r, const VideoRequest& v, const std::string& scheduler,
                       uint64_t seed, const std::string& model) {
  const std::string size = fmt::format("{}x{}", v.width, v.height);
  std::string parameters = r.prompt + "\n";
  if (!r.negative_prompt.empty()) parameters += "Negative prompt: " + r.negative_prompt + "\n";
  parameters += fmt::format("Steps: {}, Sampler: {}, CFG scale: {}, Seed: {}, Size: {}, Frames: {}, FPS: {}, Model: {}",
                            r.steps, scheduler, r.guidance_scale, seed, size, r.frames, r.fps, model);
  VideoMetadata m = {{"title", r.prompt},
                     {"comment", parameters},
                     {"prompt", r.prompt},
                     {"negative_prompt", r.negative_prompt},
                     {"seed", std::to_string(seed)},
                     {"steps", std::to_string(r.steps)},
                     {"scheduler", scheduler},
                     {"guidance_scale", fmt::format("{}", r.guidance_scale)},
                     {"size", size},
                     {"frames", std::to_string(r.frames)},
                     {"fps", std::to_string(r.fps)},
                     {"model", model},
                     {"software", "kiln " KILN_VERSION_STRING}};
  if (r.first_frame) m.emplace_back("first_frame", r.first_frame_name);
  return m;
}

}  // namespace

Result<std::unique_ptr<VideoGenerator>> VideoGenerator::open(const std::string& model,
                                                             const VideoPipelineOptions& options) {
  std::unique_ptr<VideoGenerator> g(new VideoGenerator());
  KILN_ASSIGN_OR_RETURN(g->pipeline_, VideoPipeline::load(model, options));
  g->model_name_ = model_name_of(model);
  return g;
}

Result<VideoResult> VideoGenerator::generate(const VideoGenerationRequest& r, const VideoProgress& progress) {
  const auto start = std::chrono::steady_clock::now();
  if (r.output.empty() == r.frames_dir.empty()) return invalid_argument("give an .mp4 to write or a frames folder");
  VideoResult result;
  result.seed = r.seed ? *r.seed : std::random_device{}();
  // Wan's own size: 1280 x 704, or 704 x 1280 for a portrait first frame.
  const bool portrait = r.first_frame && r.first_frame->height > r.first_frame->width;
  VideoRequest v{.prompt = r.prompt,
                 .negative_prompt = r.negative_prompt,
                 .seed = result.seed,
                 .steps = r.steps,
                 .guidance_scale = r.guidance_scale,
                 .frames = r.frames,
                 .width = r.width ? r.width : (portrait ? 704 : 1280),
                 .height = r.height ? r.height : (portrait ? 1280 : 704),
                 .scheduler = r.scheduler,
                 .first_frame = r.first_frame ? &*r.first_frame : nullptr,
                 .on_step = progress.step,
                 .on_decoded = progress.decoded,
                 .cancelled = progress.cancelled};
  // Checked here too, so a bad request fails before the writer makes a file.
  if (v.width % 32 || v.height % 32 || v.width < 32 || v.height < 32)
    return invalid_argument("the video size must be a multiple of 32 on each side, got {}x{}", v.width, v.height);
  const std::string scheduler = pipeline_->scheduler_name(r.scheduler);
  const VideoMetadata meta = metadata(r, v, scheduler, result.seed, model_name_);
  std::unique_ptr<VideoWriter> writer;
  if (!r.output.empty()) {
    KILN_ASSIGN_OR_RETURN(writer, open_mp4_writer(r.output, v.width, v.height, r.fps, meta));
    result.written = r.output;
  } else {
    KILN_ASSIGN_OR_RETURN(writer, open_png_frames_writer(r.frames_dir, v.width, v.height, meta));
    result.written = r.frames_dir;
  }
  KILN_ASSIGN_OR_RETURN(result.generation,
                        pipeline_->generate(v, [&](const TensorView& frames) { return writer->add(frames); }));
  KILN_RETURN_IF_ERROR(writer->finish());
  result.frames_written = writer->frames_written();
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace kiln
