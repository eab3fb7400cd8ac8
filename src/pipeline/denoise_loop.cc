#include "pipeline/denoise_loop.h"

#include <algorithm>

namespace kiln {

DenoiserBuildFn inline_denoiser(const Graph& unet) {
  return [&unet](GraphBuilder& b, Value* sample, Value* timestep, const ConditionValues& conditions) -> Value* {
    GraphBuilder::Scope scope = b.scope("unet");
    std::map<std::string, Value*> inputs(conditions.begin(), conditions.end());
    inputs.emplace("sample", sample);
    inputs.emplace("timestep", timestep);
    std::vector<Value*> out = b.inline_graph(unet, inputs);
    if (out.empty()) return b.fail(invalid_argument("the UNet has no output"));
    return out[0];
  };
}

std::vector<LoopState> denoise_loop_state(const StepTables& tables) {
  std::vector<LoopState> state = {{"x", "x_next"}, {"x0_prev", "x0"}, {"step", "step_next"}};
  if (!tables.unipc.empty())
    state.insert(state.end(), {{"unipc_corrected", "unipc_corrected_next"}, {"unipc_x0_older", "unipc_x0_older_next"}});
  return state;
}

Result<Graph> denoise_loop_graph(const DenoiserBuildFn& denoiser, const StepTables& tables,
                                 const DenoiseLoopSpec& spec) {
  const int64_t steps = tables.steps();
  if (steps < 1) return invalid_argument("the denoise loop needs at least one step");
  if (spec.latent.size() != 4 && spec.latent.size() != 5)
    return invalid_argument("the latents must be [batch, channels, h, w] or [batch, channels, frames, h, w]");
  const int64_t b = spec.latent[0];
  const int64_t rows = spec.guided ? 2 * b : b;
  if (spec.conditions.empty() || spec.conditions[0].first != "encoder_hidden_states" ||
      spec.conditions[0].second.size() != 3)
    return invalid_argument("the first condition must be the text context encoder_hidden_states [rows, sequence, width]");
  for (const auto& [name, shape] : spec.conditions)
    if (shape.empty() || shape[0] != rows)
      return invalid_argument("the condition {} must have {} rows ({}the batch)", name, rows,
                              spec.guided ? "2 x " : "");
  if (spec.fixed_first_frame && spec.latent.size() != 5)
    return invalid_argument("a fixed first frame needs video latents [batch, channels, frames, h, w]");
  const bool unipc = !tables.unipc.empty();
  GraphBuilder g("denoise_loop");
  const SymShape latent = sym_shape_from(spec.latent);
  Value* x = g.input("x", DType::kF32, latent);
  Value* x0_prev = g.input("x0_prev", DType::kF32, latent);
  Value* step = g.input("step", DType::kI64, SymShape{});
  Value* seed = unipc ? nullptr : g.input("seed", DType::kI64, SymShape{});
  ConditionValues conditions;
  for (const auto& [name, shape] : spec.conditions) conditions[name] = g.input(name, DType::kF32, sym_shape_from(shape));
  Value* corrected = unipc ? g.input("unipc_corrected", DType::kF32, latent) : nullptr;
  Value* x0_older = unipc ? g.input("unipc_x0_older", DType::kF32, latent) : nullptr;
  Value* first_frame = nullptr;
  if (spec.fixed_first_frame) {
    SymShape frame = latent;
    frame[2] = 1;
    first_frame = g.input("first_frame", DType::kF32, frame);
  }

  // The model input for this step: [x s, x s] (x s unguided) at timestep t,
  // both read from the tables by the counter (x itself where every scale is
  // 1, as a flow model's are).
  Value* scaled = x;
  if (std::any_of(tables.in_scale.begin(), tables.in_scale.end(), [](float s) { return s != 1.0f; })) {
    Value* scale = g.op(OpKind::kGather, {g.floats("in_scale", {steps}, tables.in_scale), step}, {}, "in_scale_at_step");
    scaled = g.op(OpKind::kMul, {x, scale}, {}, "scale_input");
  }
  Value* model_in = spec.guided ? g.op(OpKind::kConcat, {scaled, scaled}, {{"axis", int64_t(0)}}, "cfg_batch") : scaled;

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

  Value* prediction = denoiser(g, model_in, t, conditions);

  // Classifier-free guidance: uncond + g (cond - uncond), as the host loop
  // computes it. Unguided, the prediction as it is, its shape made the
  // latents' where an imported model's output leaves its dims symbolic.
  Value* guided = nullptr;
  if (spec.guided) {
    std::vector<Value*> halves = g.ops(OpKind::kSplit, {prediction}, 2, {{"axis", int64_t(0)}}, "cfg_split");
    Value* diff = g.op(OpKind::kSub, {halves[1], halves[0]}, {}, "cfg_sub");
    Value* weighted = g.op(OpKind::kMul, {diff, g.floats("guidance_scale", {}, {spec.guidance_scale})}, {}, "cfg_scale");
    guided = g.op(OpKind::kAdd, {halves[0], weighted}, {}, "cfg_add");
  } else {
    guided = g.op(OpKind::kReshape, {prediction, g.ints("latent_shape", spec.latent)}, {}, "prediction");
  }

  Value *x_next, *x0, *step_next;
  std::vector<float> coefficients;
  if (unipc) {
    coefficients.reserve(size_t(kUniPcCoefficientRows * steps));
    for (float UniPcCoefficients::*row :
         {&UniPcCoefficients::m_v, &UniPcCoefficients::c_x, &UniPcCoefficients::c_m, &UniPcCoefficients::c_c,
          &UniPcCoefficients::c_m1, &UniPcCoefficients::c_m2, &UniPcCoefficients::p_c, &UniPcCoefficients::p_m,
          &UniPcCoefficients::p_m1})
      for (const UniPcCoefficients& k : tables.unipc) coefficients.push_back(k.*row);
    std::vector<Value*> next = g.ops(
        OpKind::kUniPcStep,
        {x, guided, corrected, x0_prev, x0_older, step, g.floats("coefficients", {kUniPcCoefficientRows, steps}, coefficients)},
        5, {}, "scheduler_step");
    x_next = next[0], x0 = next[2], step_next = next[4];
    g.output(next[1], "unipc_corrected_next");
    g.output(next[3], "unipc_x0_older_next");
  } else {
    coefficients.reserve(size_t(kDenoiseCoefficientRows * steps));
    for (const auto* row : {&tables.c_x, &tables.c_out, &tables.c_prev, &tables.c_noise, &tables.d_x, &tables.d_out})
      coefficients.insert(coefficients.end(), row->begin(), row->end());
    std::vector<Value*> next =
        g.ops(OpKind::kDenoiseStep,
              {x, guided, x0_prev, step, g.floats("coefficients", {kDenoiseCoefficientRows, steps}, coefficients), seed},
              3, {{"noise_first_pair", int64_t(spec.noise_first_pair)}}, "scheduler_step");
    x_next = next[0], x0 = next[1], step_next = next[2];
  }
  if (first_frame) {  // frame 0 back to the image's latent, the rest as stepped
    const int64_t frames = spec.latent[2];
    if (frames > 1) {
      Value* rest = g.op(OpKind::kSlice, {x_next, g.ints("starts", {1}), g.ints("ends", {frames}), g.ints("axes", {2})},
                         {}, "later_frames");
      x_next = g.op(OpKind::kConcat, {first_frame, rest}, {{"axis", int64_t(2)}}, "hold_first_frame");
    } else {
      x_next = g.op(OpKind::kIdentity, {first_frame}, {}, "hold_first_frame");
    }
  }
  g.output(x_next, "x_next");
  g.output(x0, "x0");
  g.output(step_next, "step_next");
  return std::move(g).finish();
}

}  // namespace kiln
