// kiln bench MODEL: times execution modes side by side in one process, on
// the same inputs, iterations interleaved (eager, graph, eager, graph, ...)
// so drift on a shared machine hits every mode alike; reports medians, the
// graph/eager ratio, FLOPs per forward and each mode's GFLOP/s, the compiled
// plan's memory figures and its replay heap allocations (counted by
// interposing malloc, see heap_counter/).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/figures.h"
#include "cli/model_file.h"
#include "cli/model_inputs.h"
#include "cli/pass_flags.h"
#include "heap_counter/heap_counter.h"
#include "kernels/cpu/bf16.h"
#include "kernels/cpu/simd_targets.h"
#include "runtime/model_runner.h"

namespace kiln::cli {

namespace {

struct BenchOptions {
  ModelRef model;
  std::vector<std::string> inputs, dims;
  uint64_t seed = 0;
  std::string modes = "eager,graph";
  int iters = 20;
  int warmup = 2;
  bool json = false;
  bool safe_output = false;
  bool peak = true;
  PassFlags pass_flags;
};

struct ModeTimes {
  std::string name;
  std::vector<double> ms;
  double median() const { return cli::median(ms); }
  double min() const { return ms.empty() ? 0 : *std::min_element(ms.begin(), ms.end()); }
};

Result<std::vector<std::string>> parse_modes(const std::string& list) {
  std::vector<std::string> modes;
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    if (comma == std::string::npos) comma = list.size();
    std::string name = list.substr(start, comma - start);
    KILN_RETURN_IF_ERROR(parse_execution_mode(name).status().with_context("--modes"));
    if (std::find(modes.begin(), modes.end(), name) != modes.end())
      return invalid_argument("--modes: '{}' is listed twice", name);
    modes.push_back(name);
    start = comma + 1;
  }
  return modes;
}

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// The `count` steps of a profiled run that took longest: node, op, ms and,
// for the products, GFLOP/s (which kernel falls short of the peak).
nlohmann::ordered_json slowest_steps(const RunProfile& profile, size_t count) {
  std::vector<const StepProfile*> steps;
  for (const StepProfile& s : profile.steps) steps.push_back(&s);
  count = std::min(count, steps.size());
  std::partial_sort(steps.begin(), steps.begin() + ptrdiff_t(count), steps.end(),
                    [](const StepProfile* a, const StepProfile* b) { return a->ms > b->ms; });
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (size_t i = 0; i < count; ++i) {
    const StepProfile& s = *steps[i];
    nlohmann::ordered_json step;
    step["node"] = s.node->name;
    step["op"] = op_name(s.node->op);
    step["ms"] = s.ms;
    const int64_t flops = node_flops(*s.node);
    step["gflops_per_s"] = flops > 0 && s.ms > 0 ? nlohmann::ordered_json(double(flops) / (s.ms * 1e6)) : nullptr;
    list.push_back(std::move(step));
  }
  return list;
}

Status bench(const BenchOptions& opt) {
  if (opt.iters < 1) return invalid_argument("--iters must be at least 1, got {}", opt.iters);
  if (opt.warmup < 0) return invalid_argument("--warmup must not be negative, got {}", opt.warmup);
  KILN_ASSIGN_OR_RETURN(std::vector<std::string> modes, parse_modes(opt.modes));
  KILN_ASSIGN_OR_RETURN(PassOptions passes, pass_options(opt.pass_flags));
  ModelRef model = opt.model;
  KILN_ASSIGN_OR_RETURN(model.sizes, parse_dims(opt.dims));
  std::map<std::string, int64_t> default_dims;
  KILN_ASSIGN_OR_RETURN(Graph graph, load_model(model, &default_dims));
  const std::string label = opt.model.label();
  if (Status s = assign_precision(graph, passes.precision, nullptr); !s.ok()) return s.with_context(label);
  KILN_ASSIGN_OR_RETURN(ModelInputs inputs, gather_inputs(graph, label, opt.inputs, input_dim_flags(model, opt.dims), default_dims, opt.seed));
  {
    EagerExecutor check(graph);
    if (Status s = check.check_inputs(inputs.tensors, inputs.sources); !s.ok()) return s.with_context(label);
  }

  // The graph-mode plan, compiled here so its figures can be reported; auto
  // mode gets its own runner, which compiles its own and decides. Without
  // eager mode the plan takes the one graph loaded (the process then holds
  // the model's weights as a graph-mode user's would: no unused copy).
  std::vector<std::pair<std::string, Shape>> shapes;
  for (const auto& [name, t] : inputs.tensors) shapes.emplace_back(name, t.shape());
  KILN_ASSIGN_OR_RETURN(auto dims, input_dims(graph, shapes));
  const bool eager_mode = std::find(modes.begin(), modes.end(), "eager") != modes.end();
  std::optional<Graph> plan_graph;
  if (eager_mode) {
    KILN_ASSIGN_OR_RETURN(plan_graph, load_model(model));
  } else {
    plan_graph = std::move(graph);
  }
  std::optional<EagerExecutor> eager;
  if (eager_mode) eager.emplace(graph);
  auto compiled = Plan::compile(std::move(*plan_graph), {.dims = dims, .passes = passes});
  if (!compiled.ok()) return compiled.status().with_context(label);
  Plan& plan = **compiled;
  std::unique_ptr<ModelRunner> auto_runner;
  std::string auto_decision;
  if (std::find(modes.begin(), modes.end(), "auto") != modes.end()) {
    RunnerOptions options{.mode = ExecutionMode::kAuto, .passes = passes};
    options.log = [&](const std::string& line) { auto_decision = line; };
    KILN_ASSIGN_OR_RETURN(auto_runner, ModelRunner::create([&] { return load_model(model); }, options));
  }
  std::vector<Tensor> clones;  // --safe-output: the copies a caller would keep
  for (size_t i = 0; i < plan.outputs().size(); ++i) {
    KILN_ASSIGN_OR_RETURN(Tensor t, Tensor::empty(plan.outputs()[i]->dtype, plan.output(i).shape));
    clones.push_back(std::move(t));
  }

  int64_t replay_allocations = 0, replay_runs = 0;
  size_t output_clone_bytes = 0;
  size_t eager_peak = 0;
  auto run_mode = [&](const std::string& mode, bool timed) -> Status {
    if (mode == "eager") {
      Status s = eager->run(inputs.tensors).status();
      eager_peak = std::max(eager_peak, eager->allocator_stats().peak_live_bytes);
      return s;
    }
    if (mode == "auto") return auto_runner->run(inputs.tensors).status();
    HeapCounter heap;
    for (const auto& [name, t] : inputs.tensors) KILN_RETURN_IF_ERROR(plan.bind_input(name, t.view()));
    KILN_RETURN_IF_ERROR(plan.run());
    if (opt.safe_output)
      for (size_t i = 0; i < clones.size(); ++i) {
        std::memcpy(clones[i].raw(), plan.output(i).data, clones[i].nbytes());
        if (timed) output_clone_bytes += clones[i].nbytes();
      }
    if (timed) replay_allocations += heap.allocations(), ++replay_runs;
    return ok_status();
  };

  std::vector<ModeTimes> times;
  for (const std::string& m : modes) times.push_back({m, {}});
  for (int i = 0; i < opt.warmup; ++i)
    for (const std::string& m : modes) KILN_RETURN_IF_ERROR(run_mode(m, false).with_context(label));
  const bool progress = !opt.json && isatty(STDERR_FILENO);  // a counter on a terminal only
  for (int i = 0; i < opt.iters; ++i) {
    for (ModeTimes& t : times) {
      const auto start = std::chrono::steady_clock::now();
      KILN_RETURN_IF_ERROR(run_mode(t.name, true).with_context(label));
      t.ms.push_back(ms_since(start));
    }
    if (progress) fmt::print(stderr, "\rkiln bench: {}/{} iterations", i + 1, opt.iters);
  }
  if (progress) fmt::print(stderr, "\n");

  // One profiled replay: where any remaining heap allocations come from, and
  // where its time goes, per op kind.
  RunProfile profile;  // also kept for its slowest steps
  for (const auto& [name, t] : inputs.tensors) KILN_RETURN_IF_ERROR(plan.bind_input(name, t.view()));
  KILN_RETURN_IF_ERROR(plan.run(&profile));
  std::map<std::string, int64_t> allocations_by_op;
  std::map<std::string, double> ms_by_op;  // where a graph run's time goes
  for (const StepProfile& step : profile.steps) {
    if (step.heap_allocations > 0) allocations_by_op[std::string(op_name(step.node->op))] += step.heap_allocations;
    ms_by_op[std::string(op_name(step.node->op))] += step.ms;
  }

  const PlanStats& st = plan.stats();
  nlohmann::ordered_json j;
  j["model"] = label;
  j["signature"] = signature_of(inputs.tensors);
  j["iters"] = opt.iters;
  // Roofline figures: the FLOPs of the matmuls, convolutions and attention
  // (node_flops in runtime/profile.h) over each mode's median.
  // Peak: oneDNN's own matmul on this machine (kernels/cpu/matmul_peak.h).
  const int64_t flops = plan.stats().flops;
  j["flops_per_forward"] = flops;
  // The peak of the dtype the products run in (a mixed policy: bf16 if any
  // do; figures.h's peak_dtype); none where oneDNN cannot time that dtype.
  std::optional<MatmulPeak> peak;
  const DType peak_dtype = cli::peak_dtype(plan);
  if (opt.peak) {
    KILN_ASSIGN_OR_RETURN(peak, peak_for(peak_dtype));
  }
  if (peak)
    j["peak"] = {{"dtype", dtype_name(peak_dtype)}, {"gflops_per_s", peak->gflops_per_s}, {"cached", peak->cached},
                 {"machine", peak->key}};
  // Which GEMM ran the bf16 Linears, Gemms, MatMuls and Convs (bf16.h).
  if (product_dtype(plan) == DType::kBF16) j["bf16_gemm"] = bf16_gemm_name(bf16_gemm());
  // The instruction sets the kernels ran on (ONEDNN_MAX_CPU_ISA caps both).
  j["isa"] = {{"kiln", simd_targets::kiln_target()}, {"onednn", simd_targets::onednn_isa()}};
  for (const ModeTimes& t : times) {
    const double gflops = t.median() > 0 ? double(flops) / (t.median() * 1e6) : 0.0;
    j["modes"][t.name]["ms_median"] = t.median();
    j["modes"][t.name]["ms_min"] = t.min();
    j["modes"][t.name]["ms"] = t.ms;  // every timed run, in order
    j["modes"][t.name]["gflops_per_s"] = gflops;
    if (peak) j["modes"][t.name]["percent_of_peak"] = 100 * gflops / peak->gflops_per_s;
  }
  const ModeTimes* eager_t = nullptr;
  const ModeTimes* graph_t = nullptr;
  for (const ModeTimes& t : times) {
    if (t.name == "eager") eager_t = &t;
    if (t.name == "graph") graph_t = &t;
  }
  if (eager_t && graph_t) j["speedup_graph_vs_eager"] = eager_t->median() / graph_t->median();
  if (!auto_decision.empty()) j["auto_decision"] = auto_decision;
  if (HeapCounter::available() && replay_runs)
    j["replay_heap_allocations"] = replay_allocations / replay_runs;
  else
    j["replay_heap_allocations"] = nullptr;  // no counter (sanitizer build)
  j["replay_heap_allocations_by_op"] = allocations_by_op;
  j["profiled_replay_ms_by_op"] = ms_by_op;
  j["profiled_replay_slowest_steps"] = slowest_steps(profile, 15);
  j["input_copy_bytes"] = 0;  // inputs are bound by pointer; Plan has no copy path for them
  j["output_clone_bytes"] = replay_runs ? output_clone_bytes / size_t(replay_runs) : 0;
  j["output_copy_bytes"] = plan.output_copy_bytes();
  j["arena_bytes"] = st.arena_bytes;
  j["naive_bytes"] = st.naive_bytes;
  j["lower_bound_bytes"] = st.lower_bound_bytes;
  j["eager_peak_bytes"] = eager_peak;
  j["packed_weight_bytes"] = st.packed_weight_bytes;
  j["compile_ms"] = st.compile_ms;
  j["nodes"] = st.nodes;
  j["steps"] = st.steps;
  j["fusions"] = st.passes.counts;
  if (opt.json) {
    fmt::print("{}\n", j.dump(2));
    return ok_status();
  }
  fmt::print("{}  ({})\n", label, j["signature"].get<std::string>());
  fmt::print("{:<8}{:>14}{:>12}{:>12}{}\n", "mode", "median ms", "min ms", "GFLOP/s", peak ? "  % of peak" : "");
  for (const ModeTimes& t : times) {
    const auto& m = j["modes"][t.name];
    fmt::print("{:<8}{:>14.3f}{:>12.3f}{:>12.1f}", t.name, t.median(), t.min(), m["gflops_per_s"].get<double>());
    if (peak) fmt::print("{:>11.1f}", m["percent_of_peak"].get<double>());
    fmt::print("\n");
  }
  fmt::print("{:.3f} GFLOP per forward (matmuls, convolutions, attention)\n", double(flops) / 1e9);
  if (peak)
    fmt::print("peak: oneDNN {} matmul at {:.1f} GFLOP/s on this machine ({})\n", dtype_name(peak_dtype),
               peak->gflops_per_s, peak->cached ? "cached in " + default_peak_cache_path() : "measured now");
  if (j.contains("bf16_gemm"))
    fmt::print("bf16 products: {}\n", describe_bf16_gemm());
  fmt::print("kernels: kiln {}, oneDNN {}\n", j["isa"]["kiln"].get<std::string>(),
             j["isa"]["onednn"].get<std::string>());
  if (j.contains("speedup_graph_vs_eager"))
    fmt::print("graph vs eager: {:.2f}x\n", j["speedup_graph_vs_eager"].get<double>());
  if (!auto_decision.empty()) fmt::print("{}\n", auto_decision);
  fmt::print("arena {} B (lower bound {} B, naive {} B, eager peak {} B)\n", st.arena_bytes,
             st.lower_bound_bytes, st.naive_bytes, eager_peak);
  fmt::print("replay heap allocations per run: {}\n", j["replay_heap_allocations"].dump());
  fmt::print("compile {:.1f} ms, {} nodes, {} steps\n", st.compile_ms, st.nodes, st.steps);
  return ok_status();
}

}  // namespace

Handler add_bench_command(CLI::App& app) {
  auto opt = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand("bench", "Time execution modes side by side on one model");
  add_model_flags(cmd, opt->model, "an ONNX file, or a model folder or checkpoint");
  cmd->add_option("--input,-i", opt->inputs, "NAME=FILE.npy: an input tensor (random of the declared shape when omitted)");
  cmd->add_option("--dim", opt->dims, "NAME=VALUE: size of a symbolic dimension (default 1)");
  cmd->add_option("--seed", opt->seed, "seed for random inputs")->default_val(0);
  cmd->add_option("--modes", opt->modes, "comma-separated modes to time: eager, graph, auto")->default_val("eager,graph");
  cmd->add_option("--iters", opt->iters, "timed runs per mode")->default_val(20);
  cmd->add_option("--warmup", opt->warmup, "untimed runs per mode first")->default_val(2);
  cmd->add_flag("--json", opt->json, "print one JSON object with every figure");
  cmd->add_flag("--safe-output", opt->safe_output, "copy graph-mode outputs after each run (and count the bytes)");
  cmd->add_flag("!--no-peak", opt->peak, "skip the matmul peak (measured once per machine, then cached)");
  add_pass_flags(cmd, opt->pass_flags);
  return [opt]() { return bench(*opt); };
}

}  // namespace kiln::cli
