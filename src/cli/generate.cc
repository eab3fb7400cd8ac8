// kiln generate: text to image with a Stable Diffusion pipeline folder (the
// layout Hugging Face optimum's ONNX exporter writes), written as a PNG with
// what made it in the PNG's text chunks.
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <random>

#include "cli/commands.h"
#include "cli/default_model.h"
#include "cli/pass_flags.h"
#include "pipeline/pipeline.h"
#include "pipeline/png.h"
#include "pipeline/prompt_vocabulary.h"

namespace kiln::cli {

namespace {

struct GenerateFlags {
  PassFlags pass_flags;
  std::string model, negative_prompt, output = "out.png";
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

Result<PipelineOptions> pipeline_options(const std::string& mode, bool quiet, const PassFlags& pass_flags) {
  PipelineOptions options;
  KILN_ASSIGN_OR_RETURN(options.passes, pass_options(pass_flags));
  if (mode == "graph-loop") {
    options.whole_loop = true;
  } else {
    auto parsed = parse_execution_mode(mode);
    if (!parsed.ok()) return invalid_argument("unknown mode '{}' (modes: eager, graph, graph-loop, auto)", mode);
    options.mode = *parsed;
  }
  if (!quiet) options.log = [](const std::string& line) { fmt::print(stderr, "kiln: {}\n", line); };
  return options;
}

// "out.png" for one image; "out-1.png" ... "out-N.png" for several.
std::string image_path(const std::string& output, int i, int count) {
  if (count == 1) return output;
  std::filesystem::path p(output);
  return (p.parent_path() / fmt::format("{}-{}{}", p.stem().string(), i + 1, p.extension().string())).string();
}

std::string model_name(const std::string& dir) {
  std::filesystem::path p = std::filesystem::path(dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

// What made the image, for the PNG's text chunks: an A1111-style
// "parameters" line that image browsers read, and one chunk a field.
PngText png_text(const GenerateFlags& f, const std::string& prompt, uint64_t seed, const Generation& g,
                 const std::string& model) {
  const std::string size = fmt::format("{}x{}", g.width, g.height);
  std::string parameters = prompt + "\n";
  if (!f.negative_prompt.empty()) parameters += "Negative prompt: " + f.negative_prompt + "\n";
  parameters += fmt::format("Steps: {}, Sampler: {}, CFG scale: {}, Seed: {}, Size: {}, Model: {}", f.steps,
                            g.scheduler, f.guidance_scale, seed, size, model);
  if (!f.init_image.empty()) parameters += fmt::format(", Denoising strength: {}", f.strength);
  PngText text = {{"prompt", prompt},
                  {"negative_prompt", f.negative_prompt},
                  {"seed", std::to_string(seed)},
                  {"steps", std::to_string(f.steps)},
                  {"scheduler", g.scheduler},
                  {"guidance_scale", fmt::format("{}", f.guidance_scale)},
                  {"size", size},
                  {"model", model},
                  {"parameters", parameters},
                  {"software", "kiln " KILN_VERSION_STRING}};
  if (!f.init_image.empty()) {
    text.emplace_back("init_image", std::filesystem::path(f.init_image).filename().string());
    text.emplace_back("strength", fmt::format("{}", f.strength));
  }
  return text;
}

// The images (each width x height RGB) in rows of `columns`, two grey pixels
// between them.
std::vector<uint8_t> grid_pixels(const std::vector<const uint8_t*>& images, int width, int height, int columns,
                                 int* grid_width, int* grid_height) {
  constexpr int kGap = 2;
  const int n = int(images.size()), rows = (n + columns - 1) / columns, cols = std::min(columns, n);
  *grid_width = cols * width + (cols - 1) * kGap;
  *grid_height = rows * height + (rows - 1) * kGap;
  std::vector<uint8_t> grid(size_t(*grid_width) * size_t(*grid_height) * 3, 128);
  for (int i = 0; i < n; ++i) {
    const int x0 = (i % columns) * (width + kGap), y0 = (i / columns) * (height + kGap);
    for (int y = 0; y < height; ++y)
      std::copy_n(images[i] + size_t(y) * width * 3, size_t(width) * 3,
                  grid.data() + (size_t(y0 + y) * *grid_width + x0) * 3);
  }
  return grid;
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

// A model trained on a closed set of captions ignores words outside it: say
// so (unless quiet; a malformed vocabulary.json is an error either way).
Status warn_about_unknown_words(const std::string& model_dir, const std::vector<std::string>& prompts, bool quiet) {
  KILN_ASSIGN_OR_RETURN(std::optional<PromptVocabulary> vocabulary, load_prompt_vocabulary(model_dir));
  if (!vocabulary || quiet) return ok_status();
  for (const std::string& prompt : prompts) {
    const std::vector<std::string> unknown = vocabulary->unknown_words(prompt);
    if (!unknown.empty())
      fmt::print(stderr,
                 "kiln: warning: the model in {} was trained on a closed vocabulary without \"{}\": it will not "
                 "follow that part of \"{}\" (kiln generate --help lists the words it knows)\n",
                 model_dir, fmt::join(unknown, "\", \""), prompt);
  }
  return ok_status();
}

Status generate(const GenerateFlags& f) {
  const auto start = std::chrono::steady_clock::now();
  KILN_CHECK_ARG(f.steps >= 1, "--steps must be at least 1, got {}", f.steps);
  KILN_CHECK_ARG(!f.prompts.empty(), "--prompt is required");
  KILN_ASSIGN_OR_RETURN(PipelineOptions options, pipeline_options(f.mode, f.quiet, f.pass_flags));
  const std::filesystem::path out_dir = std::filesystem::path(f.output).parent_path();
  if (!out_dir.empty() && !std::filesystem::is_directory(out_dir))
    return not_found("-o {}: the folder {} does not exist", f.output, out_dir.string());
  std::optional<bool> vae_tiling;  // auto: unset
  if (f.vae_tiling != "auto") vae_tiling = f.vae_tiling == "on";
  std::optional<RgbImage> init_image;
  if (!f.init_image.empty()) {
    KILN_ASSIGN_OR_RETURN(init_image, read_png(f.init_image, 4096));
  }
  std::string model_dir = f.model;
  if (model_dir.empty()) {
    KILN_ASSIGN_OR_RETURN(model_dir, find_default_model());
  }
  KILN_RETURN_IF_ERROR(warn_about_unknown_words(model_dir, f.prompts, f.quiet));
  KILN_ASSIGN_OR_RETURN(auto pipe, Pipeline::load(model_dir, options));
  const std::string model = model_name(model_dir);

  // Prompt k draws with seed + k, so each prompt's picture is the one it
  // would get alone with that seed.
  const uint64_t seed = f.seed ? *f.seed : std::random_device{}();
  std::vector<Generation> generations;
  struct Image {
    const uint8_t* pixels;
    uint64_t seed;
    PngText text;
  };
  std::vector<Image> images;
  for (size_t k = 0; k < f.prompts.size(); ++k) {
    Progress progress(f.quiet);
    GenerateOptions o{.prompt = f.prompts[k], .negative_prompt = f.negative_prompt, .steps = f.steps,
                      .guidance_scale = f.guidance_scale, .seed = seed + k, .width = f.width, .height = f.height,
                      .batch = f.batch, .scheduler = f.scheduler,
                      .init_image = init_image ? &*init_image : nullptr, .strength = f.strength,
                      .vae_tiling = vae_tiling,
                      .on_step = [&progress](int i, int steps) { progress.step(i, steps); }};
    KILN_ASSIGN_OR_RETURN(Generation g, pipe->generate(o));
    generations.push_back(std::move(g));
  }
  for (size_t k = 0; k < f.prompts.size(); ++k) {
    const Generation& g = generations[k];
    const size_t image_bytes = size_t(g.width) * size_t(g.height) * 3;
    for (int i = 0; i < f.batch; ++i)
      images.push_back({g.pixels.data() + size_t(i) * image_bytes, seed + k, png_text(f, f.prompts[k], seed + k, g, model)});
  }

  const auto png_start = std::chrono::steady_clock::now();
  const Generation& first = generations.front();
  std::vector<std::string> written;  // and what each holds
  if (f.grid > 0) {
    std::vector<const uint8_t*> pixels;
    for (const Image& image : images) pixels.push_back(image.pixels);
    int width = 0, height = 0;
    const std::vector<uint8_t> grid = grid_pixels(pixels, first.width, first.height, f.grid, &width, &height);
    PngText text = images.front().text;
    text.emplace_back("grid", fmt::format("{} images of {}x{}, {} a row, prompt k with seed {} + k: {}",
                                          images.size(), first.width, first.height, f.grid, seed,
                                          fmt::join(f.prompts, " | ")));
    KILN_RETURN_IF_ERROR(write_png(f.output, grid.data(), width, height, text));
    written.push_back(fmt::format("{} ({} images of {}x{} in a grid, {} steps of {}, seeds {} to {}", f.output,
                                  images.size(), first.width, first.height, f.steps, first.scheduler, seed,
                                  images.back().seed));
  } else {
    for (size_t i = 0; i < images.size(); ++i) {
      const std::string path = image_path(f.output, int(i), int(images.size()));
      KILN_RETURN_IF_ERROR(write_png(path, images[i].pixels, first.width, first.height, images[i].text));
      written.push_back(fmt::format("{} ({}x{}, {} steps of {}, seed {}", path, first.width, first.height, f.steps,
                                    first.scheduler, images[i].seed));
    }
  }
  const double png_ms = seconds_since(png_start) * 1e3;

  if (f.profile)
    for (const Generation& g : generations) print_profile(g, init_image.has_value(), png_ms / generations.size());
  if (!f.quiet)
    for (const std::string& what : written) fmt::print("wrote {}, {:.2f} s)\n", what, seconds_since(start));
  return ok_status();
}

}  // namespace

Handler add_generate_command(CLI::App& app) {
  auto f = std::make_shared<GenerateFlags>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate an image from a prompt with a Stable Diffusion pipeline folder");
  cmd->add_option("--model,-m", f->model,
                  "pipeline folder in optimum's ONNX layout (model_index.json, unet/, text_encoder/, vae_decoder/, "
                  "...); default: kiln's own shapes model (below)");
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
                  "(default: the one scheduler/scheduler_config.json names)");
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
