#include "runtime/model_runner.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <utility>

namespace kiln {

namespace {
double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// A graph of `graph`'s inputs alone: enough for the input checks and the
// symbolic dims, without the weights.
Graph inputs_of(const Graph& graph) {
  Graph inputs;
  for (const Value* v : graph.inputs()) inputs.add_input(v->name, v->dtype, v->shape);
  return inputs;
}
}  // namespace

Result<ExecutionMode> parse_execution_mode(std::string_view name) {
  if (name == "eager") return ExecutionMode::kEager;
  if (name == "graph") return ExecutionMode::kGraph;
  if (name == "auto") return ExecutionMode::kAuto;
  return invalid_argument("unknown mode '{}' (modes: eager, graph, auto)", name);
}

const char* execution_mode_name(ExecutionMode mode) {
  switch (mode) {
    case ExecutionMode::kEager: return "eager";
    case ExecutionMode::kGraph: return "graph";
    case ExecutionMode::kAuto: return "auto";
  }
  return "?";
}

std::string signature_of(const NamedTensors& inputs) {
  std::string s;
  for (const auto& [name, t] : inputs) {
    if (!s.empty()) s += ' ';
    s += signature_entry(name, t.dtype(), t.shape());
  }
  return s;
}

ModelRunner::ModelRunner(GraphLoader load, RunnerOptions options)
    : load_(std::move(load)), options_(std::move(options)) {}

void ModelRunner::set_eager_graph(Graph graph, bool weights) {
  eager_.reset();  // it refers to the graph being replaced
  eager_graph_ = std::move(graph);
  eager_weights_ = weights;
  eager_ = std::make_unique<EagerExecutor>(eager_graph_);
}

Status ModelRunner::load_eager_weights() {
  if (eager_weights_) return ok_status();
  KILN_ASSIGN_OR_RETURN(Graph graph, load_());
  // Eager mode runs the unfused graph in the same precision as the plans.
  KILN_RETURN_IF_ERROR(assign_precision(graph, options_.passes.precision, nullptr));
  set_eager_graph(std::move(graph), true);
  return ok_status();
}

void ModelRunner::release_arena_memory() {
  for (auto& [signature, plan] : plans_) plan->release_arena_memory();
}

void ModelRunner::release() {
  plans_.clear();
  first_graph_.reset();
  chosen_.clear();  // auto times the modes again
  if (eager_weights_) set_eager_graph(inputs_of(eager_graph_), false);
}

Result<std::unique_ptr<ModelRunner>> ModelRunner::create(GraphLoader load, RunnerOptions options,
                                                         std::optional<Graph> loaded) {
  if (!loaded) {
    KILN_ASSIGN_OR_RETURN(Graph first, load());
    loaded = std::move(first);
  }
  std::unique_ptr<ModelRunner> runner(new ModelRunner(std::move(load), std::move(options)));
  if (runner->options_.mode == ExecutionMode::kGraph) {
    // Graph mode never runs eagerly: the first plan compiles the graph
    // loaded here, so no second copy of the weights lives beside the plan's.
    runner->set_eager_graph(inputs_of(*loaded), false);
    runner->first_graph_ = std::move(loaded);
    return runner;
  }
  KILN_RETURN_IF_ERROR(assign_precision(*loaded, runner->options_.passes.precision, nullptr));
  runner->set_eager_graph(std::move(*loaded), true);
  return runner;
}

Result<std::shared_ptr<Plan>> ModelRunner::plan_for(const NamedTensors& inputs) {
  const std::string signature = signature_of(inputs);
  if (auto it = plans_.find(signature); it != plans_.end()) {
    ++stats_.plan_hits;
    return it->second;
  }
  ++stats_.plan_misses;
  KILN_RETURN_IF_ERROR(eager_->check_inputs(inputs));
  std::vector<std::pair<std::string, Shape>> shapes;
  for (const auto& [name, t] : inputs) shapes.emplace_back(name, t.shape());
  KILN_ASSIGN_OR_RETURN(auto dims, input_dims(eager_graph_, shapes));
  std::optional<Graph> graph = std::exchange(first_graph_, std::nullopt);
  if (!graph) {
    KILN_ASSIGN_OR_RETURN(Graph loaded, load_());
    graph = std::move(loaded);
  }
  KILN_ASSIGN_OR_RETURN(auto plan, Plan::compile(std::move(*graph), {.dims = dims, .passes = options_.passes}));
  stats_.compile_ms += plan->stats().compile_ms;
  report_.compile_ms += plan->stats().compile_ms;
  std::shared_ptr<Plan> shared = std::move(plan);
  plans_.emplace(signature, shared);
  return shared;
}

Result<std::vector<Tensor>> ModelRunner::run_graph(const std::shared_ptr<Plan>& shared, const NamedTensors& inputs) {
  Plan& plan = *shared;
  auto start = std::chrono::steady_clock::now();
  for (const auto& [name, t] : inputs) KILN_RETURN_IF_ERROR(plan.bind_input(name, t.view()));
  report_.bind_ms = ms_since(start);
  start = std::chrono::steady_clock::now();
  RunProfile profile;
  KILN_RETURN_IF_ERROR(plan.run(options_.profile_steps ? &profile : nullptr));
  report_.run_ms = ms_since(start);
  report_.steps = std::move(profile.steps);
  report_.flops = plan.stats().flops;
  std::vector<Tensor> outputs;
  start = std::chrono::steady_clock::now();
  size_t cloned = 0;
  for (size_t i = 0; i < plan.outputs().size(); ++i) {
    const TensorView& v = plan.output(i);
    if (!options_.safe_output) {
      outputs.emplace_back(v.dtype, v.shape, v.data, shared);  // a view, overwritten by the next run
      continue;
    }
    KILN_ASSIGN_OR_RETURN(Tensor copy, Tensor::empty(v.dtype, v.shape));
    std::memcpy(copy.raw(), v.data, v.nbytes());
    cloned += v.nbytes();
    outputs.push_back(std::move(copy));
  }
  report_.output_clone_bytes = cloned;
  report_.output_clone_ms = options_.safe_output ? ms_since(start) : 0;
  stats_.output_clone_bytes += cloned;
  stats_.output_clone_ms += report_.output_clone_ms;
  return outputs;
}

// Auto: one warm-up and one timed run of each mode, the faster kept. Eager
// is timed first; unless another signature runs eagerly, its weights go
// before the plan compiles, so the two copies never coexist.
Result<ExecutionMode> ModelRunner::choose(const std::string& signature, const NamedTensors& inputs) {
  if (auto it = chosen_.find(signature); it != chosen_.end()) return it->second;
  KILN_RETURN_IF_ERROR(load_eager_weights());
  double ms[2] = {0, 0};
  for (int timed = 0; timed < 2; ++timed) {
    const auto start = std::chrono::steady_clock::now();
    KILN_RETURN_IF_ERROR(eager_->run(inputs).status());
    if (timed) ms[0] = ms_since(start);
  }
  auto runs_eagerly = [](const auto& entry) { return entry.second == ExecutionMode::kEager; };
  if (std::none_of(chosen_.begin(), chosen_.end(), runs_eagerly)) set_eager_graph(inputs_of(eager_graph_), false);
  {
    KILN_ASSIGN_OR_RETURN(std::shared_ptr<Plan> plan, plan_for(inputs));
    for (int timed = 0; timed < 2; ++timed) {
      const auto start = std::chrono::steady_clock::now();
      KILN_RETURN_IF_ERROR(run_graph(plan, inputs).status());
      if (timed) ms[1] = ms_since(start);
    }
  }
  const ExecutionMode pick = ms[1] <= ms[0] ? ExecutionMode::kGraph : ExecutionMode::kEager;
  if (pick == ExecutionMode::kEager) {
    plans_.erase(signature);  // its packed weights with it
    KILN_RETURN_IF_ERROR(load_eager_weights());
  }
  if (options_.log)
    options_.log(fmt::format("auto: {} (graph {:.3f} ms, eager {:.3f} ms) for {}", execution_mode_name(pick),
                             ms[1], ms[0], signature));
  chosen_[signature] = pick;
  return pick;
}

Result<std::vector<Tensor>> ModelRunner::run(const NamedTensors& inputs) {
  report_ = RunReport{};
  report_.signature = signature_of(inputs);
  ExecutionMode mode = options_.mode;
  if (mode == ExecutionMode::kAuto) {
    KILN_ASSIGN_OR_RETURN(mode, choose(report_.signature, inputs));
  }
  last_mode_ = mode;
  report_.mode = execution_mode_name(mode);
  if (mode == ExecutionMode::kEager) {
    KILN_RETURN_IF_ERROR(load_eager_weights());  // loaded already, unless release() freed them
    const auto start = std::chrono::steady_clock::now();
    auto outputs = eager_->run(inputs);
    report_.run_ms = ms_since(start);
    return outputs;
  }
  const int64_t misses = stats_.plan_misses;
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<Plan> plan, plan_for(inputs));
  report_.plan_cache_hit = stats_.plan_misses == misses && report_.compile_ms == 0;
  report_.plan_hits = stats_.plan_hits;
  report_.plan_misses = stats_.plan_misses;
  return run_graph(plan, inputs);
}

}  // namespace kiln
