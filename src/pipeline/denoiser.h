// The model a denoise loop calls: a UNet predicting noise (or velocity) for
// latents at a timestep under a text context. The host loop runs it through
// a ModelRunner step by step; the whole-loop plan builds it into the loop's
// graph (pipeline/denoise_loop.h).
//
//   Denoiser d(std::move(runner), inline_denoiser_from_file("unet/model.onnx"), {.label = "unet/model.onnx"});
//   KILN_ASSIGN_OR_RETURN(Tensor prediction, d.predict(model_in, t, {{"encoder_hidden_states", context}}));
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "pipeline/denoise_loop.h"
#include "runtime/model_runner.h"

namespace kiln {

// What the prompts give the denoiser besides the latents and the timestep,
// by its input names: encoder_hidden_states [rows, S, D] first; SDXL's UNet
// also text_embeds [rows, P] (the pooled text) and time_ids [rows, 6] (the
// size conditioning). rows: 2 batch ([negative, prompt]) guided, batch
// unguided.
using Conditioning = NamedTensors;

class Denoiser {
 public:
  struct Spec {
    std::string label;  // errors name it (the UNet's file)
    int64_t latent_channels = 4;
    DType timestep_dtype = DType::kF32;  // f32 or i64
    // The timestep's shape where the model fixes one ([1] or a scalar, as
    // some exporters write it); otherwise one per row of the model's batch.
    std::optional<Shape> timestep_shape;
  };

  Denoiser(std::unique_ptr<ModelRunner> runner, DenoiserBuildFn loop_builder, Spec spec)
      : runner_(std::move(runner)), loop_builder_(std::move(loop_builder)), spec_(std::move(spec)) {}

  // The prediction for model_in [rows, C, h, w] (2B guided, B unguided) at
  // timesteps t under the conditions: the runner's output, valid until its
  // next run.
  Result<Tensor> predict(const Tensor& model_in, const Tensor& t, const Conditioning& conditions);
  Shape timestep_shape(int64_t rows) const { return spec_.timestep_shape ? *spec_.timestep_shape : Shape{rows}; }

  const Spec& spec() const { return spec_; }
  ModelRunner& runner() { return *runner_; }
  const DenoiserBuildFn& loop_builder() const { return loop_builder_; }

 private:
  std::unique_ptr<ModelRunner> runner_;
  DenoiserBuildFn loop_builder_;
  Spec spec_;
};

}  // namespace kiln
