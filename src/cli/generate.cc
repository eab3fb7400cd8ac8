// kiln generate: text to image (and image to image) with a Stable Diffusion
// model, written as PNGs with what made them in their text chunks; text to
// video (and image to video) with Wan2.2 TI2V, written as an MP4 (or PNG
// frames) with what made it in its metadata. Argument parsing and printing
// only: generation is app/generator.h's and app/video_generator.h's.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <set>

#include "app/default_model.h"
#include "app/generator.h"
#include "app/video_generator.h"
#include "cli/commands.h"
#include "cli/pass_flags.h"
#include "pipeline/png.h"
#include "pipeline/prompt_vocabulary.h"
#include "pipeline/sd_family.h"

namespace kiln::cli {

namespace {

struct GenerateFlags {
  PassFlags pass_flags;
  std::string model, variant, tokenizer, prediction, negative_prompt, output = "out.png";
  std::vector<std::string> prompts, loras;
  int grid = 0;
  int steps = 20;
  float guidance_scale = 7.5f;
  std::optional<uint64_t> seed;
  int width = 0, height = 0, batch = 1;
  std::string scheduler, timestep_spacing, mode = "graph-loop";
  std::string init_image;
  float strength = 0.8f;
  std::string vae_tiling = "auto";
  bool quiet = false, profile = false;
  // Video (Wan) only.
  int64_t frames = 121;
  int fps = 24;
  std::string image, frames_dir;
  // Which flags were given: a video model's defaults differ (50 steps,
  // guidance 5, out.mp4), and image-only flags are refused for it.
  std::set<std::string> given;
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The denoise loop's progress on stderr: a bar with it/s and ETA on a
// terminal, one line a step otherwise, nothing when quiet.
class Progress {
 public:
  explicit Progress(bool quiet) : quiet_(quiet), tty_(isatty(STDERR_FILENO)) {}
  void step(int i, int steps) {
    if (quiet_) return;
    const int done = i + 1;
    if (!tty_) {
      fmt::print(stderr, "kiln: step {}/{}\n", done, steps);
      return;
    }
    if (i == 0) start_ = std::chrono::steady_clock::now();
    const double elapsed = seconds_since(start_);
    // Rates from step 1 on: step 0 also carries one-off work (plan compiles).
    if (done == 2) second_ = std::chrono::steady_clock::now();
    const double rate = done > 2 ? (done - 2) / seconds_since(second_) : done / std::max(elapsed, 1e-9);
    const int width = 24, filled = done * width / steps;
    const int eta = int(std::lround((steps - done) / std::max(rate, 1e-9)));
    fmt::print(stderr, "\rdenoising [{:#<{}}{:-<{}}] {}/{}  {:.2f} it/s  ETA {}:{:02}", "", filled, "", width - filled,
               done, steps, rate, eta / 60, eta % 60);
    if (done == steps) fmt::print(stderr, "\n");
  }

  // The VAE decoding a video, a latent frame at a time.
  void decoded(int64_t done, int64_t total) {
    if (quiet_) return;
    if (!tty_) {
      fmt::print(stderr, "kiln: decoded {}/{} latent frames\n", done, total);
      return;
    }
    const int width = 24, filled = int(done * width / total);
    fmt::print(stderr, "\rdecoding  [{:#<{}}{:-<{}}] {}/{} latent frames", "", filled, "", width - filled, done, total);
    if (done == total) fmt::print(stderr, "\n");
  }

 private:
  bool quiet_, tty_;
  std::chrono::steady_clock::time_point start_, second_;
};

Result<GeneratorOptions> generator_options(const GenerateFlags& f) {
  GeneratorOptions options{.model = f.model};
  PipelineOptions& p = options.pipeline;
  KILN_ASSIGN_OR_RETURN(p.passes, pass_options(f.pass_flags));
  KILN_RETURN_IF_ERROR(parse_generate_mode(f.mode, p.mode, p.whole_loop));
  p.variant = f.variant;
  p.tokenizer_dir = f.tokenizer;
  if (!f.prediction.empty()) {
    KILN_ASSIGN_OR_RETURN(p.prediction, parse_prediction_type(f.prediction));
  }
  for (const std::string& lora : f.loras) {
    KILN_ASSIGN_OR_RETURN(LoraSpec spec, parse_lora_spec(lora));
    p.loras.push_back(std::move(spec));
  }
  if (!f.quiet) p.log = [](const std::string& line) { fmt::print(stderr, "kiln: {}\n", line); };
  return options;
}

// "out.png" for one image; "out-1.png" ... "out-N.png" for several.
std::string image_path(const std::string& output, int i, int count) {
  if (count == 1) return output;
  std::filesystem::path p(output);
  return (p.parent_path() / fmt::format("{}-{}{}", p.stem().string(), i + 1, p.extension().string())).string();
}

double peak_rss_mib() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return double(usage.ru_maxrss) / 1024.0;  // Linux reports KiB
}

void print_profile(const Generation& g, bool image_to_image, double png_ms) {
  const StageTimes& t = g.times;
  fmt::print("profile ({}, {} steps of {}):\n", g.mode, g.steps_run, g.scheduler);
  fmt::print("  {:<14}{:>10.2f} ms\n", "tokenize", t.tokenize);
  fmt::print("  {:<14}{:>10.2f} ms\n", "text encoder", t.text_encoder);
  if (image_to_image) fmt::print("  {:<14}{:>10.2f} ms\n", "vae encode", t.vae_encode);
  fmt::print("  {:<14}{:>10.2f} ms  (model kernels {:.2f} ms, compiling {:.2f} ms)\n", "denoise loop", t.denoise,
             t.model, t.compile);
  fmt::print("  {:<14}{:>10.2f} ms{}\n", "vae decode", t.vae_decode, g.vae_tiled ? "  (in tiles)" : "");
  fmt::print("  {:<14}{:>10.2f} ms\n", "png", png_ms);
  fmt::print("  host overhead per step: {:.4f} ms (denoise time outside the model's kernels and compiles)\n",
             t.host_overhead_per_step(g.steps_run));
}

// Text (and an image) to video with a Wan model.
Status generate_video(const GenerateFlags& f) {
  const auto start = std::chrono::steady_clock::now();
  for (const char* flag : {"--batch", "--grid", "--init-image", "--strength", "--vae-tiling", "--timestep-spacing"})
    KILN_CHECK_ARG(!f.given.count(flag), "{} is for image models; {} makes video", flag, f.model);
  for (const char* flag : {"--tokenizer", "--prediction", "--lora"})
    KILN_CHECK_ARG(!f.given.count(flag), "{} is for Stable Diffusion checkpoints, not a Wan folder", flag);
  KILN_CHECK_ARG(f.prompts.size() == 1, "a video takes one --prompt, got {}", f.prompts.size());
  const int steps = f.given.count("--steps") ? f.steps : 50;
  KILN_CHECK_ARG(steps >= 1, "--steps must be at least 1, got {}", steps);
  KILN_CHECK_ARG(f.frames >= 1 && (f.frames - 1) % 4 == 0, "--frames must be 4k+1 (1, 5, 9, 13, 17, ...), got {}",
                 f.frames);
  KILN_CHECK_ARG(f.fps >= 1 && f.fps <= 240, "--fps must be 1 to 240, got {}", f.fps);
  for (const auto& [flag, size] : {std::pair{"--width", f.width}, std::pair{"--height", f.height}})
    KILN_CHECK_ARG(size % 32 == 0 && size <= 4096, "{} must be a multiple of 32 up to 4096, got {}", flag, size);
  VideoPipelineOptions options;
  KILN_ASSIGN_OR_RETURN(options.passes, pass_options(f.pass_flags));
  KILN_RETURN_IF_ERROR(parse_generate_mode(f.mode, options.mode, options.whole_loop));
  options.variant = f.variant;
  if (!f.quiet) options.log = [](const std::string& line) { fmt::print(stderr, "kiln: {}\n", line); };

  VideoGenerationRequest request{.prompt = f.prompts[0], .negative_prompt = f.negative_prompt, .seed = f.seed,
                                 .steps = steps, .guidance_scale = f.given.count("--guidance-scale") ? f.guidance_scale : 5.0f,
                                 .frames = f.frames, .width = f.width, .height = f.height, .fps = f.fps,
                                 .scheduler = f.scheduler, .frames_dir = f.frames_dir};
  if (f.frames_dir.empty()) {
    request.output = f.given.count("--output") ? f.output : "out.mp4";
    KILN_CHECK_ARG(std::filesystem::path(request.output).extension() == ".mp4",
                   "-o {}: a video is written as .mp4 (or give --frames-dir for PNG frames)", request.output);
    const std::filesystem::path out_dir = std::filesystem::path(request.output).parent_path();
    if (!out_dir.empty() && !std::filesystem::is_directory(out_dir))
      return not_found("-o {}: the folder {} does not exist", request.output, out_dir.string());
  } else {
    KILN_CHECK_ARG(!f.given.count("--output"), "give -o FILE.mp4 or --frames-dir DIR, not both");
  }
  if (!f.image.empty()) {
    KILN_ASSIGN_OR_RETURN(request.first_frame, read_png(f.image, 8192));
    request.first_frame_name = std::filesystem::path(f.image).filename().string();
  }
  KILN_ASSIGN_OR_RETURN(auto generator, VideoGenerator::open(f.model, options));
  Progress progress(f.quiet);
  KILN_ASSIGN_OR_RETURN(VideoResult result,
                        generator->generate(request, {.step = [&](int i, int n) { progress.step(i, n); },
                                                      .decoded = [&](int64_t d, int64_t n) { progress.decoded(d, n); }}));
  const VideoGeneration& g = result.generation;
  if (f.profile) {
    const StageTimes& t = g.times;
    fmt::print("model: {} ({})\n", f.model, generator->pipeline().description());
    fmt::print("profile ({}, {} steps of {}, {} frames of {}x{}):\n", g.mode, steps, g.scheduler, g.frames, g.width,
               g.height);
    fmt::print("  {:<14}{:>12.2f} ms\n", "tokenize", t.tokenize);
    fmt::print("  {:<14}{:>12.2f} ms\n", "text encoder", t.text_encoder);
    if (request.first_frame) fmt::print("  {:<14}{:>12.2f} ms\n", "vae encode", t.vae_encode);
    fmt::print("  {:<14}{:>12.2f} ms  (model kernels {:.2f} ms, compiling {:.2f} ms, {:.2f} ms a step)\n",
               "denoise loop", t.denoise, t.model, t.compile, t.model / steps);
    fmt::print("  {:<14}{:>12.2f} ms  (streamed a latent frame at a time, frames written as they came)\n",
               "vae decode", t.vae_decode);
    fmt::print("peak resident memory: {:.1f} MiB\n", peak_rss_mib());
  }
  if (!f.quiet)
    fmt::print("wrote {} ({} frames of {}x{} at {} fps, {} steps of {}, seed {}, {:.2f} s)\n", result.written,
               result.frames_written, g.width, g.height, f.fps, steps, g.scheduler, result.seed,
               seconds_since(start));
  return ok_status();
}

Status generate(const GenerateFlags& f) {
  if (!f.model.empty() && is_wan_folder(f.model)) return generate_video(f);
  for (const char* flag : {"--frames", "--fps", "--image", "--frames-dir"})
    KILN_CHECK_ARG(!f.given.count(flag), "{} is for video models (Wan2.2 TI2V); {} makes images", flag,
                   f.model.empty() ? std::string("kiln's default model") : f.model);
  const auto start = std::chrono::steady_clock::now();
  KILN_CHECK_ARG(f.steps >= 1, "--steps must be at least 1, got {}", f.steps);
  KILN_CHECK_ARG(!f.prompts.empty(), "--prompt is required");
  KILN_ASSIGN_OR_RETURN(GeneratorOptions options, generator_options(f));
  const std::filesystem::path out_dir = std::filesystem::path(f.output).parent_path();
  if (!out_dir.empty() && !std::filesystem::is_directory(out_dir))
    return not_found("-o {}: the folder {} does not exist", f.output, out_dir.string());
  GenerationRequest request{.prompts = f.prompts, .negative_prompt = f.negative_prompt, .seed = f.seed,
                            .steps = f.steps, .guidance_scale = f.guidance_scale, .width = f.width,
                            .height = f.height, .batch = f.batch, .scheduler = f.scheduler, .strength = f.strength,
                            .release_after = true};  // one run, then the process ends
  if (f.vae_tiling != "auto") request.vae_tiling = f.vae_tiling == "on";
  if (!f.timestep_spacing.empty()) {
    KILN_ASSIGN_OR_RETURN(request.timestep_spacing, parse_timestep_spacing(f.timestep_spacing));
  }
  if (!f.init_image.empty()) {
    KILN_ASSIGN_OR_RETURN(request.init_image, read_png(f.init_image, 4096));
    request.init_image_name = std::filesystem::path(f.init_image).filename().string();
  }
  KILN_ASSIGN_OR_RETURN(auto generator, Generator::open(options));
  // A model trained on a closed set of captions ignores words outside it: say so.
  const std::vector<std::vector<std::string>> unknown = generator->unknown_words(f.prompts);
  for (size_t k = 0; k < unknown.size() && !f.quiet; ++k)
    if (!unknown[k].empty())
      fmt::print(stderr,
                 "kiln: warning: the model in {} was trained on a closed vocabulary without \"{}\": it will not "
                 "follow that part of \"{}\" (kiln generate --help lists the words it knows)\n",
                 generator->model_path(), fmt::join(unknown[k], "\", \""), f.prompts[k]);

  std::vector<Progress> progress(f.prompts.size(), Progress(f.quiet));
  KILN_ASSIGN_OR_RETURN(GenerationResult result,
                        generator->generate(request, [&](size_t k, int i, int steps) { progress[k].step(i, steps); }));

  const auto png_start = std::chrono::steady_clock::now();
  const Generation& first = result.generations.front();
  std::vector<std::string> written;  // and what each holds
  if (f.grid > 0) {
    const GeneratedImage grid = image_grid(result.images, f.grid, f.prompts);
    KILN_RETURN_IF_ERROR(write_png(f.output, grid.rgb.data(), grid.width, grid.height, grid.text));
    written.push_back(fmt::format("{} ({} images of {}x{} in a grid, {} steps of {}, seeds {} to {}", f.output,
                                  result.images.size(), first.width, first.height, f.steps, first.scheduler,
                                  result.seed, result.images.back().seed));
  } else {
    for (size_t i = 0; i < result.images.size(); ++i) {
      const GeneratedImage& image = result.images[i];
      const std::string path = image_path(f.output, int(i), int(result.images.size()));
      KILN_RETURN_IF_ERROR(write_png(path, image.rgb.data(), image.width, image.height, image.text));
      written.push_back(fmt::format("{} ({}x{}, {} steps of {}, seed {}", path, image.width, image.height, f.steps,
                                    first.scheduler, image.seed));
    }
  }
  const double png_ms = seconds_since(png_start) * 1e3;

  if (f.profile) {
    fmt::print("model: {} ({}), loaded in {:.2f} ms\n", generator->model_path(), generator->pipeline().description(),
               generator->pipeline().load_ms());
    for (const Generation& g : result.generations)
      print_profile(g, request.init_image.has_value(), png_ms / double(result.generations.size()));
    fmt::print("peak resident memory: {:.1f} MiB\n", peak_rss_mib());
  }
  if (!f.quiet)
    for (const std::string& what : written) fmt::print("wrote {}, {:.2f} s)\n", what, seconds_since(start));
  return ok_status();
}

}  // namespace

Handler add_generate_command(CLI::App& app) {
  auto f = std::make_shared<GenerateFlags>();
  CLI::App* cmd = app.add_subcommand(
      "generate", "Generate an image from a prompt with a Stable Diffusion model, or a video with Wan2.2 TI2V");
  cmd->add_option("--model,-m", f->model,
                  "a Stable Diffusion 1.x/2.x/XL model: a single-file checkpoint (.safetensors), a diffusers folder, or "
                  "optimum's ONNX folder; or Wan2.2 TI2V-5B (its diffusers folder, or Wan's own with its .pth files "
                  "converted to .safetensors) for video; default: kiln's own shapes model (below)");
  cmd->add_option("--variant", f->variant,
                  "a diffusers folder's weights variant, e.g. fp16 (default: the plain files, or the variant's where "
                  "they are the only ones)");
  cmd->add_option("--tokenizer", f->tokenizer,
                  "a single file's tokenizer: a folder with CLIP's vocab.json and merges.txt (default: DIR/tokenizer "
                  "beside the file, then $KILN_TOKENIZER_DIR)");
  cmd->add_option("--prediction", f->prediction,
                  "eps | v: what the UNet predicts (default: the scheduler config's; a single file's family's: SD 1.x "
                  "eps, SD 2.x v, and eps for SD 2.x's 512-pixel base models)")
      ->check(CLI::IsMember({"eps", "v"}));
  cmd->add_option("--lora", f->loras,
                  "FILE[:WEIGHT]: a LoRA (.safetensors; kohya/A1111 or diffusers/PEFT keys) merged into a checkpoint's "
                  "weights at WEIGHT (default 1) before its graphs are built; give it again for more")
      ->allow_extra_args(false);
  cmd->add_option("--prompt,-p", f->prompts, "what to draw; give it again for more pictures (prompt k uses seed + k)")
      ->required()
      ->allow_extra_args(false);  // one prompt a flag: an unquoted "-p a red circle" is an error, not three prompts
  cmd->add_option("--negative-prompt,-n", f->negative_prompt, "what to steer away from");
  cmd->add_option("--output,-o", f->output,
                  "PNG file to write (several images: NAME-1.png, NAME-2.png, ...); for a video an .mp4 (default "
                  "out.mp4)")
      ->default_val("out.png");
  cmd->add_option("--grid", f->grid, "write all the images into the one PNG, this many a row")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--steps", f->steps, "denoising steps (a video model: 50)")->default_val(20);
  cmd->add_option("--guidance-scale,-g", f->guidance_scale,
                  "classifier-free guidance scale (a video model: 5); 1 or less turns guidance off, one model pass a "
                  "step on the prompt alone at half the cost: what SD-Turbo, SDXL-Turbo and LCM run with (0)")
      ->default_val(7.5f);
  cmd->add_option("--seed", f->seed, "noise seed: the same seed gives the same image (default: random; printed, and kept in the PNG)");
  cmd->add_option("--width", f->width,
                  "image width in pixels (default: the model's size; a video: a multiple of 32, default Wan's 1280, "
                  "or 704 for a portrait --image)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--height", f->height, "image height in pixels (default: the model's size; a video: 704, or 1280)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--frames", f->frames,
                  "video: frames to make, 4k+1 (Wan's default 121 = 5 s at 24 fps; on a CPU start small: 17 frames of "
                  "256x256 take minutes, 121 of 1280x704 many hours)")
      ->default_val(121);
  cmd->add_option("--fps", f->fps, "video: frames per second of the MP4")->default_val(24);
  cmd->add_option("--image", f->image,
                  "video: image to video, this PNG as the first frame (resized to cover the size, centre-cropped)");
  cmd->add_option("--frames-dir", f->frames_dir,
                  "video: write the frames as DIR/frame_0001.png ... instead of an MP4 (the folder must exist)");
  cmd->add_option("--batch", f->batch, "images per prompt")->default_val(1);
  cmd->add_option("--init-image", f->init_image,
                  "image to image: start from this PNG (its size is the output's; needs vae_encoder/)");
  cmd->add_option("--strength", f->strength,
                  "image to image: how much to change the init image, in (0, 1]; 1 starts from noise")
      ->default_val(0.8f);
  cmd->add_option("--vae-tiling", f->vae_tiling,
                  "on | off | auto: decode in overlapping tiles of the VAE's size (memory bounded by a tile; "
                  "auto: when a side is over twice the tile)")
      ->default_val("auto")
      ->check(CLI::IsMember({"on", "off", "auto"}));
  cmd->add_option("--scheduler", f->scheduler,
                  "ddim | euler | euler_a | dpmpp_2m | dpmpp_2m_karras | euler_karras | lcm | flow_euler | unipc "
                  "(default: the one the model's scheduler config names; a single file's family's; Wan: unipc)");
  cmd->add_option("--timestep-spacing", f->timestep_spacing,
                  "leading | trailing | linspace: which timesteps the steps visit (default: the scheduler config's); "
                  "trailing starts from pure noise, as SD-Turbo and SDXL-Turbo need (their single files do not say)")
      ->check(CLI::IsMember({"leading", "trailing", "linspace"}));
  cmd->add_option("--mode", f->mode,
                  "eager | graph (a compiled plan per model, a host loop over steps) | graph-loop (the whole denoise "
                  "loop as one plan, one call) | auto (times a step each way, keeps the fastest and says which)")
      ->default_val("graph-loop");
  add_pass_flags(cmd, f->pass_flags);
  cmd->add_flag("--quiet,-q", f->quiet, "print nothing but errors (and --profile)");
  cmd->add_flag("--profile", f->profile, "print the time of each stage and the host overhead per denoise step");
  cmd->footer([]() {
    auto dir = find_default_model();
    if (!dir.ok()) return fmt::format("\nDefault model: not found in {}", fmt::join(default_model_candidates(), ", "));
    auto vocabulary = load_prompt_vocabulary(*dir);
    if (!vocabulary.ok() || !*vocabulary) return fmt::format("\nDefault model: {}", *dir);
    return fmt::format("\nDefault model: {}\nIt draws coloured shapes, and knows only captions of this form:\n{}",
                       *dir, (*vocabulary)->describe());
  });
  return [f, cmd]() {
    for (const CLI::Option* option : cmd->get_options())
      if (option->count() > 0) f->given.insert(option->get_name());
    return generate(*f);
  };
}

}  // namespace kiln::cli
