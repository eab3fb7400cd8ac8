// The whole denoise loop as one graph (`kiln generate --mode graph-loop`):
// the denoiser (a UNet, a video transformer), classifier-free guidance and
// the scheduler's update for one step, compiled once into a Plan that a
// single call runs `steps` times.
//
//   inputs   x [B, C, h, w]            the latents (a video's [B, C, F, h, w]), updated in place
//            x0_prev                   the last step's x0 estimate (DPM++ 2M, UniPC), in place
//            step (i64 scalar)         the step counter, in place
//            seed (i64 scalar)         the noise seed (a plan serves every seed)
//            encoder_hidden_states [2B, S, D]   [negative, prompt] context ([B, S, D] unguided),
//            and the denoiser's other conditions (SDXL: text_embeds, time_ids), rows likewise
//            UniPC only: unipc_corrected, unipc_x0_older   its other state, in place
//            image to video only: first_frame [B, C, 1, h, w]   the image's latent
//   outputs  x_next, x0, step_next     bound over x, x0_prev and step (and UniPC's
//                                      unipc_corrected_next, unipc_x0_older_next over theirs):
//                                      denoise_loop_state() lists the pairs
//
//   per step:  s = in_scale[step]; t = timestep[step]         (tables, Gather by the counter)
//              out = denoiser(concat(x s, x s), t, context)
//              guided = uncond + g (cond - uncond)
//              (unguided, guidance off: guided = denoiser(x s, t, context), one pass)
//              x_next, x0, step_next = kiln.DenoiseStep(x, guided, x0_prev, step, coefficients)
//                                      (kiln.UniPcStep for UniPC)
//              image to video: frame 0 of x_next put back to first_frame
//
// Every per-step scalar is read from a table indexed by the counter when the
// step runs; nothing step-dependent is baked into a step's arguments, so one
// plan replays every step correctly. Ancestral noise is drawn inside the
// plan from the seed and the counter, at the place in kiln's noise stream
// where the host loop draws it: the modes give the same image.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ir/builder.h"
#include "pipeline/scheduler.h"

namespace kiln {

struct DenoiseLoopSpec {
  Shape latent;                                          // [B, C, h, w], or a video's [B, C, F, h, w]
  // The denoiser's conditions by input name, each [2 batch, ...] ([batch,
  // ...] unguided): encoder_hidden_states [rows, S, D], the text encoder's
  // output, first; SDXL's text_embeds and time_ids.
  std::vector<std::pair<std::string, Shape>> conditions;
  DType timestep_dtype = DType::kF32;                    // the UNet's timestep input
  Shape timestep_shape;                                  // its shape: one per row of the model's batch, [1] or a scalar
  float guidance_scale = 7.5f;
  bool guided = true;                                    // classifier-free guidance: the model runs [uncond, cond]
  uint64_t noise_first_pair = 0;                         // where step 0's noise starts in the stream
  bool fixed_first_frame = false;                        // a video's frame 0 held at first_frame (image to video)
};

// The loop graph's condition inputs, by name (DenoiseLoopSpec::conditions).
using ConditionValues = std::map<std::string, Value*, std::less<>>;
// Adds the denoiser to the loop graph: its prediction for `sample` at
// `timestep` (spec.timestep_dtype, spec.timestep_shape) given the conditions.
using DenoiserBuildFn =
    std::function<Value*(GraphBuilder& b, Value* sample, Value* timestep, const ConditionValues& conditions)>;
Result<Graph> denoise_loop_graph(const DenoiserBuildFn& denoiser, const StepTables& tables, const DenoiseLoopSpec& spec);

// A DenoiserBuildFn that copies `unet` into the loop graph (its inputs
// sample, timestep and the conditions by name; its first output the
// prediction).
DenoiserBuildFn inline_denoiser(const Graph& unet);

// The loop's state, each output to bind over its input: x, x0_prev, step, and
// UniPC's own.
struct LoopState {
  const char* input;
  const char* output;
};
std::vector<LoopState> denoise_loop_state(const StepTables& tables);

}  // namespace kiln
