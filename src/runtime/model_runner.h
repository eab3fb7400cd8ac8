// Runs a model in one of kiln's execution modes:
//   eager  node by node (EagerExecutor), the baseline;
//   graph  a compiled Plan per input signature, kept in a cache;
//   auto   on the first call of each signature, times one eager and one
//          graph run (each after a warm-up run) and keeps the faster,
//          logging the decision with both timings. One copy of the weights
//          at a time: the eager graph's are let go before the plan compiles
//          (and read again if eager wins, or for the next signature's
//          timing), and a plan that loses is dropped.
//
//   auto runner = ModelRunner::create([] { return load(); }, {.mode = ExecutionMode::kAuto});
//   KILN_ASSIGN_OR_RETURN(std::vector<Tensor> out, (*runner)->run({{"x", x}}));
//
// Inputs are bound by pointer (never copied). Graph-mode outputs are views
// into the plan (which they keep alive), overwritten by the next run, unless
// `safe_output` asks for copies (their cost is counted in stats()).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/eager_executor.h"
#include "runtime/plan.h"
#include "runtime/profile.h"

namespace kiln {

enum class ExecutionMode { kEager, kGraph, kAuto };

// "eager" | "graph" | "auto"; an error naming the choices otherwise.
Result<ExecutionMode> parse_execution_mode(std::string_view name);
const char* execution_mode_name(ExecutionMode mode);

// "x:f32[2,4,32,32] t:i64[2]": what selects a compiled plan.
std::string signature_of(const NamedTensors& inputs);

struct RunnerOptions {
  ExecutionMode mode = ExecutionMode::kGraph;
  PassOptions passes;
  bool safe_output = false;                   // clone graph-mode outputs
  bool profile_steps = false;                 // time every graph-mode step (last_report().steps)
  std::function<void(const std::string&)> log;  // decisions worth telling the user
};

struct RunnerStats {
  int64_t plan_hits = 0, plan_misses = 0;
  double compile_ms = 0;          // summed over misses
  size_t output_clone_bytes = 0;  // safe_output copies
  double output_clone_ms = 0;
};

class ModelRunner {
 public:
  using GraphLoader = std::function<Result<Graph>()>;

  // `load` makes a fresh copy of the model graph (each plan compiles and
  // rewrites its own). `loaded`, a copy the caller read already, serves as
  // the first load. In graph mode the first plan compiles the first load, so
  // one signature's run holds one copy of the weights.
  static Result<std::unique_ptr<ModelRunner>> create(GraphLoader load, RunnerOptions options,
                                                     std::optional<Graph> loaded = std::nullopt);

  Result<std::vector<Tensor>> run(const NamedTensors& inputs);

  // The mode the last run used (auto resolves to eager or graph).
  ExecutionMode last_mode() const { return last_mode_; }
  // Where the last run's time went.
  const RunReport& last_report() const { return report_; }
  const RunnerStats& stats() const { return stats_; }
  // The plan for a signature, compiling it on a miss.
  Result<std::shared_ptr<Plan>> plan_for(const NamedTensors& inputs);
  // Gives the idle plans' arenas back to the system (Plan::release_arena_memory):
  // the last run's outputs are lost.
  void release_arena_memory();
  // Frees everything compiled or loaded (plans, packed weights, eager
  // weights): the next run loads and compiles again. For a model not needed
  // again soon.
  void release();
  // Whether the eager executor holds the model's weights (eager mode, and
  // auto while a signature runs eagerly), not just its inputs.
  bool holds_eager_weights() const { return eager_weights_; }

 private:
  ModelRunner(GraphLoader load, RunnerOptions options);
  Result<std::vector<Tensor>> run_graph(const std::shared_ptr<Plan>& plan, const NamedTensors& inputs);
  Result<ExecutionMode> choose(const std::string& signature, const NamedTensors& inputs);
  // The eager graph becomes `graph` (the executor rebuilt over it).
  void set_eager_graph(Graph graph, bool weights);
  Status load_eager_weights();

  GraphLoader load_;
  RunnerOptions options_;
  Graph eager_graph_;  // the model's inputs only while !eager_weights_
  bool eager_weights_ = false;
  std::unique_ptr<EagerExecutor> eager_;  // runs eager_graph_
  std::optional<Graph> first_graph_;  // graph mode: create()'s load, until the first plan compiles it
  std::map<std::string, std::shared_ptr<Plan>> plans_;  // shared with the output views
  std::map<std::string, ExecutionMode> chosen_;  // auto's decision per signature
  ExecutionMode last_mode_ = ExecutionMode::kEager;
  RunnerStats stats_;
  RunReport report_;
};

}  // namespace kiln
