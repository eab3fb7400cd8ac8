// kiln generate: text to image (and image to image) with a Stable Diffusion
// model, written as PNGs with what made them in their text chunks. Argument
// parsing and printing only: generation is app/generator.h's.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>

#include "app/default_model.h"
#include "app/generator.h"
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
  std::vector<std::string> prompts;
  int grid = 0;
  int steps = 20;
  float guidance_scale = 7.5f;
  std::optional<uint64_t> seed;
  int width = 0, height = 0, batch = 1;
  std::string scheduler, mode = "graph-loop";
  std::string init_image;
  float strength = 0.8f;
  std::string vae_tiling = "auto";
  bool quiet = false, profile = false;
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

 private:
  bool quiet_, tty_;
  std::chrono::steady_clock::time_point start_, second_;
};

Result<GeneratorOptions> generator_options(const GenerateFlags& f) {
  GeneratorOptions options{.model = f.model};
  PipelineOptions& p = options.pipeline;
  KILN_ASSIGN_OR_RETURN(p.passes, pass_options(f.pass_flags));
  if (f.mode == "graph-loop") {
    p.whole_loop = true;
  } else {
    auto parsed = parse_execution_mode(f.mode);
    if (!parsed.ok()) return invalid_argument("unknown mode '{}' (modes: eager, graph, graph-loop, auto)", f.mode);
    p.mode = *parsed;
  }
  p.variant = f.variant;
  p.tokenizer_dir = f.tokenizer;
  if (!f.prediction.empty()) {
    KILN_ASSIGN_OR_RETURN(p.prediction, parse_prediction_type(f.prediction));
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

Status generate(const GenerateFlags& f) {
  const auto start = std::chrono::steady_clock::now();
  KILN_CHECK_ARG(f.steps >= 1, "--steps must be at least 1, got {}", f.steps);
  KILN_CHECK_ARG(!f.prompts.empty(), "--prompt is required");
  KILN_ASSIGN_OR_RETURN(GeneratorOptions options, generator_options(f));
  const std::filesystem::path out_dir = std::filesystem::path(f.output).parent_path();
  if (!out_dir.empty() && !std::filesystem::is_directory(out_dir))
    return not_found("-o {}: the folder {} does not exist", f.output, out_dir.string());
  GenerationRequest request{.prompts = f.prompts, .negative_prompt = f.negative_prompt, .seed = f.seed,
                            .steps = f.steps, .guidance_scale = f.guidance_scale, .width = f.width,
                            .height = f.height, .batch = f.batch, .scheduler = f.scheduler, .strength = f.strength};
  if (f.vae_tiling != "auto") request.vae_tiling = f.vae_tiling == "on";
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
  CLI::App* cmd = app.add_subcommand("generate", "Generate an image from a prompt with a Stable Diffusion model");
  cmd->add_option("--model,-m", f->model,
                  "a Stable Diffusion 1.x/2.x model: a single-file checkpoint (.safetensors), a diffusers folder, or "
                  "optimum's ONNX folder; default: kiln's own shapes model (below)");
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
  cmd->add_option("--prompt,-p", f->prompts, "what to draw; give it again for more pictures (prompt k uses seed + k)")
      ->required()
      ->allow_extra_args(false);  // one prompt a flag: an unquoted "-p a red circle" is an error, not three prompts
  cmd->add_option("--negative-prompt,-n", f->negative_prompt, "what to steer away from");
  cmd->add_option("--output,-o", f->output, "PNG file to write (several images: NAME-1.png, NAME-2.png, ...)")
      ->default_val("out.png");
  cmd->add_option("--grid", f->grid, "write all the images into the one PNG, this many a row")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--steps", f->steps, "denoising steps")->default_val(20);
  cmd->add_option("--guidance-scale,-g", f->guidance_scale, "classifier-free guidance scale")->default_val(7.5f);
  cmd->add_option("--seed", f->seed, "noise seed: the same seed gives the same image (default: random; printed, and kept in the PNG)");
  cmd->add_option("--width", f->width, "image width in pixels (default: the model's size)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--height", f->height, "image height in pixels (default: the model's size)")->check(CLI::NonNegativeNumber);
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
                  "ddim | euler | euler_a | dpmpp_2m | dpmpp_2m_karras | euler_karras | flow_euler "
                  "(default: the one the model's scheduler config names; a single file's family's)");
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
  return [f]() { return generate(*f); };
}

}  // namespace kiln::cli
