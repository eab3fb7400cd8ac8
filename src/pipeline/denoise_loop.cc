#include "pipeline/denoise_loop.h"

#include <map>

namespace kiln {

namespace {

// Copies `from`'s nodes into `into`, every value renamed `prefix` + name,
// its inputs read from `bound` (by input name). Returns `from`'s outputs as
// values of `into`. Constants share their tensors' storage.
Result<std::vector<Value*>> inline_graph(Graph& into, const Graph& from, const std::string& prefix,
                                         const std::map<std::string, Value*>& bound) {
  std::map<const Value*, Value*> mapped;
  for (const Value* in : from.inputs()) {
    auto it = bound.find(in->name);
    if (it == bound.end()) return invalid_argument("the UNet has an input '{}' the denoise loop does not feed", in->name);
    mapped[in] = it->second;
  }
  auto value_of = [&](const Value* v) -> Value* {
    if (!v) return nullptr;
    if (auto it = mapped.find(v); it != mapped.end()) return it->second;
    Value* copy = v->constant ? into.add_constant(prefix + v->name, *v->constant) : into.add_value(prefix + v->name);
    mapped[v] = copy;
    return copy;
  };
  for (const auto& node : from.nodes()) {
    std::vector<Value*> inputs, outputs;
    for (const Value* in : node->inputs) inputs.push_back(value_of(in));
    for (const Value* out : node->outputs) outputs.push_back(value_of(out));
    into.add_node(node->op, prefix + node->name, std::move(inputs), std::move(outputs), node->attrs);
  }
  std::vector<Value*> outputs;
  for (const Value* out : from.outputs()) outputs.push_back(value_of(out));
  return outputs;
}

Attributes int_attr(const char* name, int64_t value) {
  Attributes a;
  a.set(name, value);
  return a;
}

template <typename T>
Value* table(Graph& g, const std::string& name, Shape shape, const std::vector<T>& values) {
  return g.add_constant(name, *Tensor::from_vector<T>(std::move(shape), values));
}

}  // namespace

Result<Graph> denoise_loop_graph(const Graph& unet, const StepTables& tables, const DenoiseLoopSpec& spec) {
  const int64_t steps = tables.steps(), b = spec.batch;
  if (steps < 1) return invalid_argument("the denoise loop needs at least one step");
  if (spec.context_shape.size() != 3 || spec.context_shape[0] != 2 * b)
    return invalid_argument("the text context must be [2 x batch, sequence, width]");
  Graph g;
  g.name = "denoise_loop";
  g.opset = unet.opset;
  const SymShape latent{b, spec.channels, spec.height, spec.width};
  Value* x = g.add_input("x", DType::kF32, latent);
  Value* x0_prev = g.add_input("x0_prev", DType::kF32, latent);
  Value* step = g.add_input("step", DType::kI64, SymShape{});
  Value* seed = g.add_input("seed", DType::kI64, SymShape{});
  Value* context = g.add_input("encoder_hidden_states", DType::kF32, sym_shape_from(spec.context_shape));

  // The model input for this step: [x s, x s] at timestep t, both read from
  // the tables by the counter.
  Value* scale = g.add_value("in_scale_t");
  g.add_node(OpKind::kGather, "in_scale_at_step", {table<float>(g, "in_scale", {steps}, tables.in_scale), step}, {scale});
  Value* scaled = g.add_value("x_scaled");
  g.add_node(OpKind::kMul, "scale_input", {x, scale}, {scaled});
  Value* model_in = g.add_value("model_in");
  g.add_node(OpKind::kConcat, "cfg_batch", {scaled, scaled}, {model_in}, int_attr("axis", 0));

  Value* timesteps = nullptr;
  if (spec.timestep_dtype == DType::kI64) {
    std::vector<int64_t> ts(tables.timestep.begin(), tables.timestep.end());
    timesteps = table<int64_t>(g, "timesteps", {steps}, ts);
  } else if (spec.timestep_dtype == DType::kF32) {
    timesteps = table<float>(g, "timesteps", {steps}, tables.timestep);
  } else {
    return unsupported("the UNet's timestep is {}; kiln feeds f32 or i64", dtype_name(spec.timestep_dtype));
  }
  Value* t = g.add_value("timestep_t");
  g.add_node(OpKind::kGather, "timestep_at_step", {timesteps, step}, {t});
  Value* t_batch = t;
  if (!spec.timestep_shape.empty()) {
    t_batch = g.add_value("timestep_batch");
    const int64_t rank = int64_t(spec.timestep_shape.size());
    Value* shape = table<int64_t>(g, "timestep_shape", {rank}, spec.timestep_shape);
    g.add_node(OpKind::kExpand, "timestep_per_sample", {t, shape}, {t_batch});
  }

  KILN_ASSIGN_OR_RETURN(std::vector<Value*> unet_out,
                        inline_graph(g, unet, "unet/",
                                     {{"sample", model_in}, {"timestep", t_batch}, {"encoder_hidden_states", context}}));
  if (unet_out.empty()) return invalid_argument("the UNet has no output");

  // Classifier-free guidance: uncond + g (cond - uncond), as the host loop computes it.
  Value *uncond = g.add_value("uncond"), *cond = g.add_value("cond");
  g.add_node(OpKind::kSplit, "cfg_split", {unet_out[0]}, {uncond, cond}, int_attr("axis", 0));
  Value* diff = g.add_value("cfg_diff");
  g.add_node(OpKind::kSub, "cfg_sub", {cond, uncond}, {diff});
  Value* weighted = g.add_value("cfg_weighted");
  g.add_node(OpKind::kMul, "cfg_scale", {diff, table<float>(g, "guidance_scale", {}, {spec.guidance_scale})}, {weighted});
  Value* guided = g.add_value("guided");
  g.add_node(OpKind::kAdd, "cfg_add", {uncond, weighted}, {guided});

  std::vector<float> coefficients;
  coefficients.reserve(size_t(kDenoiseCoefficientRows * steps));
  for (const auto* row : {&tables.c_x, &tables.c_out, &tables.c_prev, &tables.c_noise, &tables.d_x, &tables.d_out})
    coefficients.insert(coefficients.end(), row->begin(), row->end());
  Value *x_next = g.add_value("x_next"), *x0 = g.add_value("x0"), *step_next = g.add_value("step_next");
  g.add_node(OpKind::kDenoiseStep, "scheduler_step",
             {x, guided, x0_prev, step, table<float>(g, "coefficients", {kDenoiseCoefficientRows, steps}, coefficients),
              seed},
             {x_next, x0, step_next}, int_attr("noise_first_pair", int64_t(spec.noise_first_pair)));
  for (Value* v : {x_next, x0, step_next}) g.mark_output(v);
  KILN_RETURN_IF_ERROR(graph_infer_shapes(g));
  KILN_RETURN_IF_ERROR(graph_verify(g));
  return g;
}

}  // namespace kiln
