// Text to image (and image to image) with a Stable Diffusion 1.x/2.x
// model: an optimum ONNX folder, a single-file checkpoint or a diffusers
// folder. A pipeline is its roles, which one small file per family wires
// (pipeline/sd_family.h):
//
//   conditioner   tokenizer + text encoder: the prompts' context (pipeline/conditioner.h)
//   denoiser      the UNet the loop calls, or builds into its plan (pipeline/denoiser.h)
//   latent codec  the VAE: latents to pixels, tiled; an image to latents (pipeline/latent_codec.h)
//   scheduler     the per-step coefficient tables (pipeline/scheduler.h)
//
//   KILN_ASSIGN_OR_RETURN(auto pipe, Pipeline::load("v1-5-pruned-emaonly.safetensors", {.whole_loop = true}));
//   KILN_ASSIGN_OR_RETURN(Generation g, pipe->generate({.prompt = "a cat", .steps = 20, .seed = 1}));
//   // g.pixels: height x width x RGB bytes of the first image
//
// Generation, as diffusers' StableDiffusionPipeline does it: the prompt and
// the negative prompt encoded as one batch [negative, prompt];
// classifier-free guidance from one batched UNet pass over [x, x] per step;
// the scheduler's update as per-step coefficient tables; latents /
// scaling_factor decoded by the VAE (in blended tiles for large images);
// image to image as the img2img pipeline: the encoded picture noised to the
// level of the step `strength` picks. The initial latents and all noise
// come from kiln's generator (core/rng.h): the same seed gives the same
// image in every run.
#pragma once

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/rng.h"
#include "models/lora.h"
#include "pipeline/conditioner.h"
#include "pipeline/denoiser.h"
#include "pipeline/latent_codec.h"
#include "pipeline/png.h"
#include "pipeline/scheduler.h"
#include "runtime/model_runner.h"

namespace kiln {

struct PipelineOptions {
  ExecutionMode mode = ExecutionMode::kGraph;  // how each model runs
  // The whole denoise loop (UNet, guidance, scheduler) as one plan run by one
  // call (`--mode graph-loop`), instead of a host loop calling the UNet. With
  // mode kAuto, the first generation of each loop signature times one step
  // each way and keeps the faster.
  bool whole_loop = false;
  // Passes switched off and the precision policy, for every model and the
  // loop plan (bf16: the products in bf16; the scheduler and latents stay f32).
  PassOptions passes;
  std::function<void(const std::string&)> log;  // decisions worth telling the user
  // Checkpoints: a diffusers folder's weights variant ("fp16"; empty: the
  // plain files, or the variant's where they are the only ones); where a
  // single file's tokenizer is (vocab.json, merges.txt; empty: beside the
  // file, then $KILN_TOKENIZER_DIR); the prediction type, overriding the
  // scheduler config's (a single file's default: its family's).
  std::string variant;
  std::string tokenizer_dir;
  std::optional<PredictionType> prediction;
  // LoRA files merged into a checkpoint's weights before its graphs are
  // built (models/lora.h), in order; not for ONNX folders.
  std::vector<LoraSpec> loras;
};

// A pipeline's roles and settings, as a family file wires them.
struct PipelineParts {
  std::unique_ptr<Conditioner> conditioner;
  std::unique_ptr<Denoiser> denoiser;
  std::unique_ptr<LatentCodec> codec;
  SchedulerConfig scheduler;
  int64_t sample_size = 64;  // the denoiser's latent size: the default image is sample_size x the codec's factor
  bool size_conditioning = false;  // SDXL: the denoiser also takes time_ids (original size, crop, target size)
  // A full LCM UNet's: the guidance is the denoiser's input timestep_cond,
  // this wide (guidance_embedding(), below), never a CFG batch.
  int64_t guidance_embedding_dim = 0;
  std::string description;   // "SD 1.x, single file (f16)", for messages
};

// Called after each denoise step: (step index, steps).
using StepCallback = std::function<void(int, int)>;
// Asked after each denoise step: true stops the generation there with a
// kCancelled status (a server's cancel).
using CancelCheck = std::function<bool()>;

// The kCancelled status a generation stops with after `done` of `steps` steps.
Status cancelled_after(int done, int steps);

// Whether a guidance scale asks for classifier-free guidance: the model run
// on [uncond, cond] each step. At 1 or below (diffusers' rule) the model runs
// once a step on the prompt alone, at half the cost: what the few-step models
// (SD-Turbo, SDXL-Turbo, LCM) are run with.
inline bool guidance_on(float guidance_scale) { return guidance_scale > 1.0f; }

// A full LCM UNet's timestep_cond for guidance scale g, `rows` rows of
// `dim`: diffusers' get_guidance_scale_embedding of w = g - 1, sines first,
// frequencies exp(-k ln(10000) / (dim/2 - 1)) of 1000 w.
Result<Tensor> guidance_embedding(float guidance_scale, int64_t dim, int64_t rows);

struct GenerateOptions {
  std::string prompt, negative_prompt;
  int steps = 20;
  float guidance_scale = 7.5f;
  uint64_t seed = 0;
  int width = 0, height = 0;  // 0: the UNet's sample_size times the VAE factor
  int batch = 1;              // images per prompt
  std::string scheduler;      // empty: the one scheduler_config.json names
  // Overrides the config's timestep spacing: "trailing" for the few-step
  // models (SD-Turbo, SDXL-Turbo), whose single files say nothing of it.
  std::optional<TimestepSpacing> timestep_spacing;
  // Image to image: start from this picture (its size is the output's),
  // encoded by vae_encoder and noised to the level of the step that
  // `strength` (in (0, 1]) picks; 1 starts from noise.
  const RgbImage* init_image = nullptr;
  float strength = 0.8f;
  // Decode in overlapping tiles of the VAE's sample size, blended, as
  // diffusers' enable_vae_tiling (memory bounded by a tile); unset: when a
  // side is over twice the tile.
  std::optional<bool> vae_tiling;
  bool keep_trajectory = false;  // keep the latents after every step
  // Nothing follows (a one-shot `kiln generate`): each stage's compiled
  // models are freed once it is done (the text encoders before the denoise
  // loop, the denoiser before the VAE), so the peak memory is the largest
  // stage's rather than their sum; a later generation compiles them again.
  bool release_stages = false;
  StepCallback on_step;
  CancelCheck cancelled;
  // More prompts in the same run (a server batching requests of one shape):
  // each its own prompt, negative prompt and seed, `batch` images each, after
  // this one's. Their images follow this one's in the Generation. Not with
  // image to image or a scheduler that draws noise every step (euler_a):
  // those have one noise stream for the whole batch (draws_step_noise).
  struct Member {
    std::string prompt, negative_prompt;
    uint64_t seed = 0;
    int batch = 1;
  };
  std::vector<Member> batch_with;
};

// Wall time of each stage, ms. The denoise loop is also split into the time
// the model's kernels ran (`model`: the UNet plan or eager runs of a host
// loop; the one plan call of graph-loop, which includes guidance and the
// scheduler), compiling (first runs), and the rest: the host's work per step
// (building inputs, plan lookup and binding, guidance, the scheduler update).
struct StageTimes {
  double tokenize = 0, text_encoder = 0, vae_encode = 0;
  double denoise = 0, model = 0, compile = 0, vae_decode = 0;
  // Host time per denoise step outside the model's kernels and compiles, ms.
  double host_overhead_per_step(int steps) const {
    return steps > 0 ? std::max(0.0, denoise - compile - model) / steps : 0.0;
  }
};

struct Generation {
  Tensor latents;                  // [batch, C, h, w], the final latents
  std::vector<Tensor> trajectory;  // the latents after each step (keep_trajectory)
  Tensor image;                    // [batch, 3, H, W] in [-1, 1], the VAE's output
  std::vector<uint8_t> pixels;     // batch images of H x W x RGB, row-major
  int width = 0, height = 0;
  int steps_run = 0;               // denoise steps run: fewer than asked for image to image
  std::string scheduler;           // the scheduler used (parse_scheduler_kind's name)
  std::string mode;                // how the denoise loop ran: eager, graph or graph-loop
  bool vae_tiled = false;          // decoded in tiles
  StageTimes times;
};

class Pipeline {
 public:
  // `path`: an optimum ONNX folder, a .safetensors single file or a diffusers folder.
  static Result<std::unique_ptr<Pipeline>> load(const std::string& path, const PipelineOptions& options);
  Result<Generation> generate(const GenerateOptions& options);

  const std::string& path() const { return path_; }
  const std::string& description() const { return parts_.description; }
  const ClipTokenizer& tokenizer() const { return parts_.conditioner->tokenizer(); }
  // The default image size: the UNet's sample_size times the VAE factor.
  int default_size() const { return int(parts_.sample_size * parts_.codec->spec().factor); }
  int vae_factor() const { return int(parts_.codec->spec().factor); }
  // Whether `scheduler` (empty: the model's) draws fresh noise every step,
  // which keeps a run to one seed (GenerateOptions::batch_with).
  Result<bool> draws_step_noise(const std::string& scheduler) const;
  // Milliseconds load() took: reading the files, building or importing the graphs.
  double load_ms() const { return load_ms_; }

 private:
  Pipeline(std::string path, PipelineParts parts, const PipelineOptions& options)
      : path_(std::move(path)), parts_(std::move(parts)), options_(options) {}
  // One generation's denoise loop: what every way of running it reads.
  struct DenoiseRun {
    const StepTables& tables;
    const GenerateOptions& options;
    const Conditioning& conditions;  // [negative, prompt] rows (2 batch); unguided the prompt's (batch)
    uint64_t noise_first_pair;   // where step 0's noise starts in the seed's stream
    std::string key;             // what a compiled loop depends on: shapes, guidance, scheduler, steps
  };
  // The scheduler `name` asks for ("dpmpp_2m_karras": dpmpp_2m with Karras
  // sigmas; empty: the one the config names, or its substitute) and the
  // config it runs with. `substituted`: set when kiln lacks the config's own.
  struct SchedulerChoice {
    SchedulerKind kind;
    SchedulerConfig config;
    bool substituted = false;
  };
  Result<SchedulerChoice> choose_scheduler(const std::string& name) const;
  // Whether `o` runs the denoiser on [uncond, cond] (guidance over 1 and not
  // embedded in the model, as an LCM UNet's is).
  bool classifier_free(const GenerateOptions& o) const;
  // The first `steps` steps of the loop over x, in place.
  Status run_host_loop(const DenoiseRun& run, int steps, Tensor& x, Generation& g);
  Status run_whole_loop(const DenoiseRun& run, int steps, Tensor& x, Generation& g);
  // auto: whether graph-loop beats the host loop on this loop, measured once per key.
  Result<bool> choose_whole_loop(const DenoiseRun& run, const Tensor& x);

  std::string path_;
  PipelineParts parts_;
  PipelineOptions options_;
  double load_ms_ = 0;
  std::map<std::string, std::unique_ptr<Plan>> loop_plans_;  // graph-loop: by DenoiseRun::key
  std::map<std::string, bool> whole_loop_chosen_;            // auto: by DenoiseRun::key
};

}  // namespace kiln
