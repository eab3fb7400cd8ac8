// Generation as a library: a request in, images and what made them out.
// `kiln generate` and the HTTP server are thin callers of it.
//
//   KILN_ASSIGN_OR_RETURN(auto gen, Generator::open({.model = "v1-5-pruned-emaonly.safetensors"}));
//   KILN_ASSIGN_OR_RETURN(GenerationResult r, gen->generate({.prompts = {"a cat"}, .seed = 1}));
//   write_png("cat.png", r.images[0].rgb.data(), r.images[0].width, r.images[0].height, r.images[0].text);
//
// Seeds: prompt k draws with seed + k, so each prompt's pictures are the
// ones it makes alone with that seed; without a seed a random one is drawn
// (and reported). Each image's PNG text says what made it: the prompt,
// negative prompt, seed, steps, scheduler, guidance, size, model and an
// A1111-style "parameters" line that image browsers read.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pipeline/pipeline.h"
#include "pipeline/png.h"
#include "pipeline/prompt_vocabulary.h"

namespace kiln {

struct GeneratorOptions {
  std::string model;         // a model folder or checkpoint; empty: kiln's default model (app/default_model.h)
  PipelineOptions pipeline;  // modes, precision, the checkpoint's variant, tokenizer and prediction
};

struct GenerationRequest {
  std::vector<std::string> prompts;  // one set of `batch` images each
  std::string negative_prompt;
  std::optional<uint64_t> seed;  // none: a random one
  int steps = 20;
  float guidance_scale = 7.5f;
  int width = 0, height = 0;  // 0: the model's size
  int batch = 1;
  std::string scheduler;  // empty: the model's
  std::optional<TimestepSpacing> timestep_spacing;  // unset: the model's scheduler config's
  // Image to image: start from this picture (its size is the output's).
  std::optional<RgbImage> init_image;
  std::string init_image_name;  // for the PNG text
  float strength = 0.8f;
  std::optional<bool> vae_tiling;  // unset: when a side is over twice the VAE's tile
  // The last prompt's generation frees each stage once done
  // (GenerateOptions::release_stages): for a one-shot run, whose peak memory
  // is then the largest stage's.
  bool release_after = false;
};

struct GeneratedImage {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;  // height x width x RGB
  uint64_t seed = 0;
  std::string prompt;
  PngText text;  // what made it
};

struct GenerationResult {
  std::vector<GeneratedImage> images;   // prompt by prompt, each prompt's batch in order
  std::vector<Generation> generations;  // one per prompt: latents, stage times, how it ran
  uint64_t seed = 0;                    // prompt 0's
  double seconds = 0;
};

// Called after each denoise step: (prompt index, step index, steps).
using GenerationProgress = std::function<void(size_t, int, int)>;

class Generator {
 public:
  static Result<std::unique_ptr<Generator>> open(const GeneratorOptions& options);

  // `cancelled`, asked after each denoise step, stops the request there (kCancelled).
  Result<GenerationResult> generate(const GenerationRequest& request, const GenerationProgress& progress = {},
                                    const CancelCheck& cancelled = {});
  // Requests of one shape as one run (a server's batch): one result each,
  // its images as it would have them alone, up to rounding: a batch may
  // differ from a lone run in the last bit of a few pixels. Every request
  // must be batchable() and share batch_key().
  Result<std::vector<GenerationResult>> generate_together(const std::vector<GenerationRequest>& requests,
                                                          const GenerationProgress& progress = {},
                                                          const CancelCheck& cancelled = {});
  // Whether a request may join such a run: one prompt, no init image, and a
  // scheduler that draws no noise after the first step.
  bool batchable(const GenerationRequest& request) const;
  // What requests must share to run together: size, steps, scheduler and its spacing, guidance, tiling.
  static std::string batch_key(const GenerationRequest& request);

  // For a model trained on a closed vocabulary (its vocabulary.json): each
  // prompt's words it never saw, which it would quietly ignore; empty otherwise.
  std::vector<std::vector<std::string>> unknown_words(const std::vector<std::string>& prompts) const;

  const std::string& model_path() const { return model_path_; }
  const std::string& model_name() const { return model_name_; }  // the folder's or file's name
  Pipeline& pipeline() { return *pipeline_; }

 private:
  Generator() = default;
  // Image `index` of a generation, with the PNG text of the request that asked for it.
  GeneratedImage take_image(const GenerationRequest& r, const std::string& prompt, uint64_t seed, const Generation& g,
                            size_t index) const;
  std::string model_path_, model_name_;
  std::unique_ptr<Pipeline> pipeline_;
  std::optional<PromptVocabulary> vocabulary_;
};

// A model's name for messages and metadata: its folder's or file's name.
std::string model_name_of(const std::string& path);

// The images in rows of `columns`, two grey pixels between them, with the
// first image's text and a "grid" entry saying what it holds (`prompts`:
// the request's, listed there).
GeneratedImage image_grid(const std::vector<GeneratedImage>& images, int columns, const std::vector<std::string>& prompts);

}  // namespace kiln
