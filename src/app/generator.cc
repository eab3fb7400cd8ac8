#include "app/generator.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <random>

#include "app/default_model.h"

namespace kiln {

namespace {

namespace fs = std::filesystem;

// What made the image, for the PNG's text chunks: an A1111-style
// "parameters" line that image browsers read, and one chunk a field.
PngText png_text(const GenerationRequest& r, const std::string& prompt, uint64_t seed, const Generation& g,
                 const std::string& model) {
  const std::string size = fmt::format("{}x{}", g.width, g.height);
  std::string parameters = prompt + "\n";
  if (!r.negative_prompt.empty()) parameters += "Negative prompt: " + r.negative_prompt + "\n";
  parameters += fmt::format("Steps: {}, Sampler: {}, CFG scale: {}, Seed: {}, Size: {}, Model: {}", r.steps,
                            g.scheduler, r.guidance_scale, seed, size, model);
  if (r.init_image) parameters += fmt::format(", Denoising strength: {}", r.strength);
  PngText text = {{"prompt", prompt},
                  {"negative_prompt", r.negative_prompt},
                  {"seed", std::to_string(seed)},
                  {"steps", std::to_string(r.steps)},
                  {"scheduler", g.scheduler},
                  {"guidance_scale", fmt::format("{}", r.guidance_scale)},
                  {"size", size},
                  {"model", model},
                  {"parameters", parameters},
                  {"software", "kiln " KILN_VERSION_STRING}};
  if (r.timestep_spacing) text.emplace_back("timestep_spacing", timestep_spacing_name(*r.timestep_spacing));
  if (r.init_image) {
    text.emplace_back("init_image", r.init_image_name);
    text.emplace_back("strength", fmt::format("{}", r.strength));
  }
  return text;
}

}  // namespace

GeneratedImage Generator::take_image(const GenerationRequest& r, const std::string& prompt, uint64_t seed,
                                     const Generation& g, size_t index) const {
  const size_t image_bytes = size_t(g.width) * size_t(g.height) * 3;
  GeneratedImage image{.width = g.width, .height = g.height, .seed = seed, .prompt = prompt};
  image.rgb.assign(g.pixels.begin() + std::ptrdiff_t(index * image_bytes),
                   g.pixels.begin() + std::ptrdiff_t((index + 1) * image_bytes));
  image.text = png_text(r, prompt, seed, g, model_name_);
  return image;
}

std::string model_name_of(const std::string& path) {
  fs::path p = fs::path(path).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

Result<std::unique_ptr<Generator>> Generator::open(const GeneratorOptions& options) {
  std::unique_ptr<Generator> g(new Generator());
  g->model_path_ = options.model;
  if (g->model_path_.empty()) {
    KILN_ASSIGN_OR_RETURN(g->model_path_, find_default_model());
  }
  g->model_name_ = model_name_of(g->model_path_);
  if (fs::is_directory(g->model_path_)) {
    KILN_ASSIGN_OR_RETURN(g->vocabulary_, load_prompt_vocabulary(g->model_path_));
  }
  KILN_ASSIGN_OR_RETURN(g->pipeline_, Pipeline::load(g->model_path_, options.pipeline));
  return g;
}

std::vector<std::vector<std::string>> Generator::unknown_words(const std::vector<std::string>& prompts) const {
  std::vector<std::vector<std::string>> words;
  for (const std::string& prompt : prompts)
    words.push_back(vocabulary_ ? vocabulary_->unknown_words(prompt) : std::vector<std::string>{});
  return words;
}

Result<GenerationResult> Generator::generate(const GenerationRequest& r, const GenerationProgress& progress,
                                             const CancelCheck& cancelled) {
  const auto start = std::chrono::steady_clock::now();
  if (r.prompts.empty()) return invalid_argument("a prompt is required");
  if (r.steps < 1) return invalid_argument("the steps must be at least 1, got {}", r.steps);
  GenerationResult result;
  result.seed = r.seed ? *r.seed : std::random_device{}();
  for (size_t k = 0; k < r.prompts.size(); ++k) {
    const GenerateOptions o{
        .prompt = r.prompts[k], .negative_prompt = r.negative_prompt, .steps = r.steps,
        .guidance_scale = r.guidance_scale, .seed = result.seed + k, .width = r.width, .height = r.height,
        .batch = r.batch, .scheduler = r.scheduler, .timestep_spacing = r.timestep_spacing,
        .init_image = r.init_image ? &*r.init_image : nullptr,
        .strength = r.strength, .vae_tiling = r.vae_tiling,
        .release_stages = r.release_after && k + 1 == r.prompts.size(),
        .on_step = [&](int i, int steps) {
          if (progress) progress(k, i, steps);
        },
        .cancelled = cancelled};
    KILN_ASSIGN_OR_RETURN(Generation g, pipeline_->generate(o));
    for (int i = 0; i < r.batch; ++i)
      result.images.push_back(take_image(r, r.prompts[k], result.seed + k, g, size_t(i)));
    result.generations.push_back(std::move(g));
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

bool Generator::batchable(const GenerationRequest& r) const {
  if (r.prompts.size() != 1 || r.init_image) return false;
  auto noisy = pipeline_->draws_step_noise(r.scheduler);
  return noisy.ok() && !*noisy;
}

std::string Generator::batch_key(const GenerationRequest& r) {
  return fmt::format("{}x{} steps={} scheduler={} spacing={} guidance={} tiling={}", r.width, r.height, r.steps,
                     r.scheduler, r.timestep_spacing ? timestep_spacing_name(*r.timestep_spacing) : "",
                     r.guidance_scale, r.vae_tiling ? int(*r.vae_tiling) : -1);
}

Result<std::vector<GenerationResult>> Generator::generate_together(const std::vector<GenerationRequest>& requests,
                                                                   const GenerationProgress& progress,
                                                                   const CancelCheck& cancelled) {
  if (requests.empty()) return std::vector<GenerationResult>{};
  const auto start = std::chrono::steady_clock::now();
  const GenerationRequest& first = requests[0];
  std::vector<uint64_t> seeds;
  for (const GenerationRequest& r : requests) {
    if (!batchable(r) || batch_key(r) != batch_key(first))
      return invalid_argument("requests of different shapes, several prompts or image to image cannot run together");
    seeds.push_back(r.seed ? *r.seed : std::random_device{}());
  }
  GenerateOptions o{.prompt = first.prompts[0], .negative_prompt = first.negative_prompt, .steps = first.steps,
                    .guidance_scale = first.guidance_scale, .seed = seeds[0], .width = first.width,
                    .height = first.height, .batch = first.batch, .scheduler = first.scheduler,
                    .timestep_spacing = first.timestep_spacing, .vae_tiling = first.vae_tiling,
                    .on_step = [&](int i, int steps) {
                      if (progress) progress(0, i, steps);
                    },
                    .cancelled = cancelled};
  for (size_t k = 1; k < requests.size(); ++k)
    o.batch_with.push_back({requests[k].prompts[0], requests[k].negative_prompt, seeds[k], requests[k].batch});
  KILN_ASSIGN_OR_RETURN(Generation g, pipeline_->generate(o));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::vector<GenerationResult> results;
  size_t image = 0;
  for (size_t k = 0; k < requests.size(); ++k) {
    GenerationResult& result = results.emplace_back(GenerationResult{.seed = seeds[k], .seconds = seconds});
    for (int i = 0; i < requests[k].batch; ++i, ++image)
      result.images.push_back(take_image(requests[k], requests[k].prompts[0], seeds[k], g, image));
  }
  return results;
}

GeneratedImage image_grid(const std::vector<GeneratedImage>& images, int columns, const std::vector<std::string>& prompts) {
  constexpr int kGap = 2;
  GeneratedImage grid;
  if (images.empty() || columns < 1) return grid;
  const int n = int(images.size()), width = images[0].width, height = images[0].height;
  const int rows = (n + columns - 1) / columns, cols = std::min(columns, n);
  grid.width = cols * width + (cols - 1) * kGap;
  grid.height = rows * height + (rows - 1) * kGap;
  grid.rgb.assign(size_t(grid.width) * size_t(grid.height) * 3, 128);
  for (int i = 0; i < n; ++i) {
    const int x0 = (i % columns) * (width + kGap), y0 = (i / columns) * (height + kGap);
    for (int y = 0; y < height; ++y)
      std::copy_n(images[size_t(i)].rgb.data() + size_t(y) * width * 3, size_t(width) * 3,
                  grid.rgb.data() + (size_t(y0 + y) * grid.width + x0) * 3);
  }
  grid.seed = images[0].seed;
  grid.prompt = images[0].prompt;
  grid.text = images[0].text;
  grid.text.emplace_back("grid", fmt::format("{} images of {}x{}, {} a row, prompt k with seed {} + k: {}", n, width,
                                             height, columns, grid.seed, fmt::join(prompts, " | ")));
  return grid;
}

}  // namespace kiln
