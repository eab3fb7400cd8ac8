#include "pipeline/denoise_loop.h"

namespace kiln {

DenoiserBuildFn inline_denoiser(const Graph& unet) {
  return [&unet](GraphBuilder& b, Value* sample, Value* timestep, Value* context) -> Value* {
    GraphBuilder::Scope scope = b.scope("unet");
    std::vector<Value*> out =
        b.inline_graph(unet, {{"sample", sample}, {"timestep", timestep}, {"encoder_hidden_states", context}});
    if (out.empty()) return b.fail(invalid_argument("the UNet has no output"));
    return out[0];
  };
}

Result<Graph> denoise_loop_graph(const DenoiserBuildFn& denoiser, const StepTables& tables,
                                 const DenoiseLoopSpec& spec) {
  const int64_t steps = tables.steps(), b = spec.batch;
  if (steps < 1) return invalid_argument("the denoise loop needs at least one step");
  if (spec.context_shape.size() != 3 || spec.context_shape[0] != 2 * b)
    return invalid_argument("the text context must be [2 x batch, sequence, width]");
  GraphBuilder g("denoise_loop");
  const SymShape latent{b, spec.channels, spec.height, spec.width};
  Value* x = g.input("x", DType::kF32, latent);
  Value* x0_prev = g.input("x0_prev", DType::kF32, latent);
  Value* step = g.input("step", DType::kI64, SymShape{});
  Value* seed = g.input("seed", DType::kI64, SymShape{});
  Value* context = g.input("encoder_hidden_states", DType::kF32, sym_shape_from(spec.context_shape));

  // The model input for this step: [x s, x s] at timestep t, both read from
  // the tables by the counter.
  Value* scale = g.op(OpKind::kGather, {g.floats("in_scale", {steps}, tables.in_scale), step}, {}, "in_scale_at_step");
  Value* scaled = g.op(OpKind::kMul, {x, scale}, {}, "scale_input");
  Value* model_in = g.op(OpKind::kConcat, {scaled, scaled}, {{"axis", int64_t(0)}}, "cfg_batch");

  Value* timesteps = nullptr;
  if (spec.timestep_dtype == DType::kI64)
    timesteps = g.ints("timesteps", std::vector<int64_t>(tables.timestep.begin(), tables.timestep.end()));
  else if (spec.timestep_dtype == DType::kF32)
    timesteps = g.floats("timesteps", {steps}, tables.timestep);
  else
    return unsupported("the UNet's timestep is {}; kiln feeds f32 or i64", dtype_name(spec.timestep_dtype));
  Value* t = g.op(OpKind::kGather, {timesteps, step}, {}, "timestep_at_step");
  if (!spec.timestep_shape.empty())
    t = g.op(OpKind::kExpand, {t, g.ints("timestep_shape", spec.timestep_shape)}, {}, "timestep_per_sample");

  Value* prediction = denoiser(g, model_in, t, context);

  // Classifier-free guidance: uncond + g (cond - uncond), as the host loop computes it.
  std::vector<Value*> halves = g.ops(OpKind::kSplit, {prediction}, 2, {{"axis", int64_t(0)}}, "cfg_split");
  Value* diff = g.op(OpKind::kSub, {halves[1], halves[0]}, {}, "cfg_sub");
  Value* weighted = g.op(OpKind::kMul, {diff, g.floats("guidance_scale", {}, {spec.guidance_scale})}, {}, "cfg_scale");
  Value* guided = g.op(OpKind::kAdd, {halves[0], weighted}, {}, "cfg_add");

  std::vector<float> coefficients;
  coefficients.reserve(size_t(kDenoiseCoefficientRows * steps));
  for (const auto* row : {&tables.c_x, &tables.c_out, &tables.c_prev, &tables.c_noise, &tables.d_x, &tables.d_out})
    coefficients.insert(coefficients.end(), row->begin(), row->end());
  std::vector<Value*> next =
      g.ops(OpKind::kDenoiseStep,
            {x, guided, x0_prev, step, g.floats("coefficients", {kDenoiseCoefficientRows, steps}, coefficients), seed},
            3, {{"noise_first_pair", int64_t(spec.noise_first_pair)}}, "scheduler_step");
  g.output(next[0], "x_next");
  g.output(next[1], "x0");
  g.output(next[2], "step_next");
  return std::move(g).finish();
}

}  // namespace kiln
