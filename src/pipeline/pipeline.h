// A Stable Diffusion 1.x/2.x pipeline folder in the layout Hugging Face
// optimum's ONNX exporter writes, and text-to-image generation over it:
//
//   DIR/model_index.json
//   DIR/scheduler/scheduler_config.json
//   DIR/tokenizer/{vocab.json,merges.txt,special_tokens_map.json,tokenizer_config.json}
//   DIR/text_encoder/model.onnx       input_ids -> last_hidden_state
//   DIR/unet/model.onnx (+ model.onnx_data)  sample, timestep, encoder_hidden_states -> out_sample
//   DIR/vae_decoder/model.onnx (+ config.json: scaling_factor, block_out_channels)
//   DIR/vae_encoder/model.onnx        sample -> latent distribution (image to image only)
//
//   KILN_ASSIGN_OR_RETURN(auto pipe, Pipeline::load("models/sd15", {.mode = ExecutionMode::kGraph}));
//   KILN_ASSIGN_OR_RETURN(Generation g, pipe->generate({.prompt = "a cat", .steps = 20, .seed = 1}));
//   // g.pixels: height x width x RGB bytes of the first image
//
// Generation, as diffusers' StableDiffusionPipeline does it: the prompt and
// the negative prompt encoded as one batch [negative, prompt];
// classifier-free guidance from one batched UNet pass over [x, x] per step;
// the scheduler's update as per-step coefficient tables (pipeline/scheduler.h);
// latents / scaling_factor decoded by the VAE (in blended tiles for large
// images, as diffusers' enable_vae_tiling); image to image as the img2img
// pipeline: the encoded picture noised to the level of the step `strength`
// picks. The initial latents and all noise come from kiln's generator
// (core/rng.h): the same seed gives the same image in every run.
#pragma once

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/rng.h"
#include "pipeline/clip_tokenizer.h"
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
};

// Called after each denoise step: (step index, steps).
using StepCallback = std::function<void(int, int)>;

struct GenerateOptions {
  std::string prompt, negative_prompt;
  int steps = 20;
  float guidance_scale = 7.5f;
  uint64_t seed = 0;
  int width = 0, height = 0;  // 0: the UNet's sample_size times the VAE factor
  int batch = 1;              // images per prompt
  std::string scheduler;      // empty: the one scheduler_config.json names
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
  StepCallback on_step;
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
  static Result<std::unique_ptr<Pipeline>> load(const std::string& dir, const PipelineOptions& options);
  Result<Generation> generate(const GenerateOptions& options);

  const std::string& dir() const { return dir_; }
  const ClipTokenizer& tokenizer() const { return *tokenizer_; }
  // The default image size: the UNet's sample_size times the VAE factor.
  int default_size() const { return sample_size_ * vae_factor_; }
  int vae_factor() const { return vae_factor_; }

 private:
  Pipeline() = default;
  // One generation's denoise loop: what every way of running it reads.
  struct DenoiseRun {
    const StepTables& tables;
    const GenerateOptions& options;
    const Tensor& context;       // [2 batch, S, D]: [negative, prompt]
    uint64_t noise_first_pair;   // where step 0's noise starts in the seed's stream
    std::string key;             // what a compiled loop depends on: shapes, guidance, scheduler, steps
  };
  Result<Tensor> encode_prompts(const GenerateOptions& options, StageTimes& times);
  // The init image's latents x0 = scaling_factor * (mean + std * eps), eps the
  // next draws of `noise`.
  Result<Tensor> encode_image(const RgbImage& image, int64_t batch, NoiseStream& noise, StageTimes& times);
  Shape timestep_shape(int64_t batch) const;
  // The first `steps` steps of the loop over x, in place.
  Status run_host_loop(const DenoiseRun& run, int steps, Tensor& x, Generation& g);
  Status run_whole_loop(const DenoiseRun& run, int steps, Tensor& x, Generation& g);
  // auto: whether graph-loop beats the host loop on this loop, measured once per key.
  Result<bool> choose_whole_loop(const DenoiseRun& run, const Tensor& x);
  Status decode(Generation& g, bool tiled);
  Result<Tensor> decode_latents(const Tensor& z);  // z: latents / scaling_factor
  Result<Tensor> decode_tiled(const Tensor& z);

  std::string dir_, unet_path_;
  PipelineOptions options_;
  std::optional<ClipTokenizer> tokenizer_;
  SchedulerConfig scheduler_config_;
  std::unique_ptr<ModelRunner> text_encoder_, unet_, vae_decoder_;
  std::unique_ptr<ModelRunner> vae_encoder_;  // loaded by the first image-to-image generation
  std::map<std::string, std::unique_ptr<Plan>> loop_plans_;  // graph-loop: by DenoiseRun::key
  std::map<std::string, bool> whole_loop_chosen_;            // auto: by DenoiseRun::key
  DType ids_dtype_ = DType::kI64, timestep_dtype_ = DType::kF32;
  // The UNet's timestep shape when its export fixes one ([1] or a scalar, as
  // some exporters write it); otherwise kiln feeds [2 batch].
  std::optional<Shape> timestep_static_shape_;
  size_t hidden_state_output_ = 0;  // the text encoder's last_hidden_state
  int latent_channels_ = 4, sample_size_ = 64, vae_factor_ = 8;
  int vae_tile_ = 512;  // the VAE config's sample_size: tiled decoding's tile, pixels
  float scaling_factor_ = 0.18215f;
};

}  // namespace kiln
