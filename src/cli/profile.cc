// kiln profile MODEL: where a compiled plan's time goes. The model is
// compiled for its inputs' shapes, run --warmup times, then replayed --iters
// times with every step timed; each step's figure is its median over those
// replays (one replay on a shared machine is too noisy to rank steps by).
// Printed: the whole run, each op kind, and the slowest steps, with GFLOP/s
// and the share of the measured matmul peak for the products (matmuls,
// convolutions, attention), whose FLOPs are counted (runtime/profile.h).
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/commands.h"
#include "cli/figures.h"
#include "cli/model_file.h"
#include "cli/model_inputs.h"
#include "cli/pass_flags.h"
#include "runtime/eager_executor.h"
#include "runtime/model_runner.h"
#include "runtime/profile.h"

namespace kiln::cli {

namespace {

struct ProfileOptions {
  ModelRef model;
  std::vector<std::string> inputs, dims;
  uint64_t seed = 0;
  int iters = 5;
  int warmup = 1;
  int top = 15;
  bool json = false;
  bool peak = true;
  PassFlags pass_flags;
};

// Replays the plan `iters` times, timing every step: the steps, each with
// its median ms over the replays.
Result<std::vector<StepProfile>> time_steps(Plan& plan, int iters, std::vector<double>& run_ms) {
  std::vector<std::vector<double>> samples;
  std::vector<StepProfile> steps;
  const bool progress = isatty(STDERR_FILENO);  // a counter on a terminal only
  for (int i = 0; i < iters; ++i) {
    RunProfile profile;
    const auto start = std::chrono::steady_clock::now();
    KILN_RETURN_IF_ERROR(plan.run(&profile));
    run_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    if (steps.empty()) {
      steps = profile.steps;
      samples.resize(steps.size());
    }
    for (size_t k = 0; k < steps.size(); ++k) samples[k].push_back(profile.steps[k].ms);
    if (progress) fmt::print(stderr, "\rkiln profile: {}/{} replays", i + 1, iters);
  }
  if (progress) fmt::print(stderr, "\n");
  for (size_t k = 0; k < steps.size(); ++k) steps[k].ms = median(samples[k]);
  return steps;
}

// GFLOP/s of `flops` in `ms`; 0 for a step with no products.
double rate(int64_t flops, double ms) { return flops > 0 && ms > 0 ? double(flops) / (ms * 1e6) : 0.0; }

// GFLOP/s and % of the peak, as JSON fields; nothing for a non-product.
void add_rate(nlohmann::ordered_json& j, int64_t flops, double ms, const std::optional<MatmulPeak>& peak) {
  if (flops <= 0) return;
  j["gflops_per_s"] = rate(flops, ms);
  if (peak) j["percent_of_peak"] = 100 * rate(flops, ms) / peak->gflops_per_s;
}

// "  312.4   78.1" (GFLOP/s, % of peak), blank for a non-product.
std::string rate_columns(int64_t flops, double ms, const std::optional<MatmulPeak>& peak) {
  if (flops <= 0) return "";
  std::string s = fmt::format("{:>10.1f}", rate(flops, ms));
  if (peak) s += fmt::format("{:>8.1f}", 100 * rate(flops, ms) / peak->gflops_per_s);
  return s;
}

Status profile(const ProfileOptions& opt) {
  if (opt.iters < 1) return invalid_argument("--iters must be at least 1, got {}", opt.iters);
  if (opt.warmup < 0) return invalid_argument("--warmup must not be negative, got {}", opt.warmup);
  if (opt.top < 0) return invalid_argument("--top must not be negative, got {}", opt.top);
  KILN_ASSIGN_OR_RETURN(PassOptions passes, pass_options(opt.pass_flags));
  ModelRef model = opt.model;
  KILN_ASSIGN_OR_RETURN(model.sizes, parse_dims(opt.dims));
  std::map<std::string, int64_t> default_dims;
  KILN_ASSIGN_OR_RETURN(Graph graph, load_model(model, &default_dims));
  const std::string label = opt.model.label();
  if (Status s = assign_precision(graph, passes.precision, nullptr); !s.ok()) return s.with_context(label);
  KILN_ASSIGN_OR_RETURN(ModelInputs inputs, gather_inputs(graph, label, opt.inputs, input_dim_flags(model, opt.dims), default_dims, opt.seed));
  {
    EagerExecutor check(graph);  // the same messages, naming the input files, as kiln run
    if (Status s = check.check_inputs(inputs.tensors, inputs.sources); !s.ok()) return s.with_context(label);
  }
  std::vector<std::pair<std::string, Shape>> shapes;
  for (const auto& [name, t] : inputs.tensors) shapes.emplace_back(name, t.shape());
  KILN_ASSIGN_OR_RETURN(auto dims, input_dims(graph, shapes));
  auto compiled = Plan::compile(std::move(graph), {.dims = dims, .passes = passes});
  if (!compiled.ok()) return compiled.status().with_context(label);
  Plan& plan = **compiled;
  for (const auto& [name, t] : inputs.tensors) KILN_RETURN_IF_ERROR(plan.bind_input(name, t.view()));
  for (int i = 0; i < opt.warmup; ++i) KILN_RETURN_IF_ERROR(plan.run().with_context(label));
  std::vector<double> run_ms;
  auto timed = time_steps(plan, opt.iters, run_ms);
  if (!timed.ok()) return timed.status().with_context(label);
  const std::vector<StepProfile>& steps = *timed;
  std::optional<MatmulPeak> peak;
  const DType peak_dtype = cli::peak_dtype(plan);
  if (opt.peak) {
    KILN_ASSIGN_OR_RETURN(peak, peak_for(peak_dtype));
  }

  const double run_ms_median = median(run_ms);
  const int64_t run_flops = plan.stats().flops;
  double steps_ms = 0;
  for (const StepProfile& s : steps) steps_ms += s.ms;
  std::vector<const StepProfile*> slowest;
  for (const StepProfile& s : steps) slowest.push_back(&s);
  const size_t shown = std::min(size_t(opt.top), slowest.size());
  std::partial_sort(slowest.begin(), slowest.begin() + ptrdiff_t(shown), slowest.end(),
                    [](const StepProfile* a, const StepProfile* b) { return a->ms > b->ms; });
  slowest.resize(shown);
  const std::vector<OpTotal> ops = totals_by_op(steps);
  auto share = [&](double ms) { return steps_ms > 0 ? 100 * ms / steps_ms : 0.0; };

  if (opt.json) {
    nlohmann::ordered_json j;
    j["model"] = label;
    j["signature"] = signature_of(inputs.tensors);
    j["replays"] = opt.iters;
    j["run_ms_median"] = run_ms_median;
    j["flops_per_forward"] = run_flops;
    add_rate(j, run_flops, run_ms_median, peak);
    if (peak) j["peak"] = {{"dtype", dtype_name(peak_dtype)}, {"gflops_per_s", peak->gflops_per_s}};
    j["steps"] = steps.size();
    j["ops"] = nlohmann::ordered_json::array();
    for (const OpTotal& o : ops) {
      nlohmann::ordered_json row = {{"op", o.op}, {"steps", o.calls}, {"ms", o.ms}, {"percent", share(o.ms)}};
      add_rate(row, o.flops, o.ms, peak);
      j["ops"].push_back(std::move(row));
    }
    j["slowest_steps"] = nlohmann::ordered_json::array();
    for (const StepProfile* s : slowest) {
      nlohmann::ordered_json row = {{"node", s->node->name}, {"op", op_name(s->node->op)}, {"ms", s->ms},
                                    {"percent", share(s->ms)}};
      add_rate(row, node_flops(*s->node), s->ms, peak);
      j["slowest_steps"].push_back(std::move(row));
    }
    fmt::print("{}\n", j.dump(2));
    return ok_status();
  }
  fmt::print("{}  ({})\n", label, signature_of(inputs.tensors));
  fmt::print("run: {:.3f} ms (median of {} replays), {:.3f} GFLOP", run_ms_median, opt.iters, double(run_flops) / 1e9);
  if (run_flops > 0) fmt::print(", {:.1f} GFLOP/s", rate(run_flops, run_ms_median));
  if (peak && run_flops > 0)
    fmt::print(", {:.1f} % of the {} matmul peak ({:.1f} GFLOP/s)",
               100 * rate(run_flops, run_ms_median) / peak->gflops_per_s, dtype_name(peak_dtype), peak->gflops_per_s);
  fmt::print("\n\n");
  const char* rate_header = peak ? "   GFLOP/s  % peak" : "   GFLOP/s";
  fmt::print("{:<24}{:>7}{:>11}{:>7}{}\n", "op", "steps", "ms", "%", rate_header);
  for (const OpTotal& o : ops)
    fmt::print("{:<24}{:>7}{:>11.3f}{:>7.1f}{}\n", o.op, o.calls, o.ms, share(o.ms), rate_columns(o.flops, o.ms, peak));
  if (slowest.empty()) return ok_status();
  fmt::print("\nslowest steps\n{:<24}{:>11}{:>7}{}  node\n", "op", "ms", "%", rate_header);
  for (const StepProfile* s : slowest)
    fmt::print("{:<24}{:>11.3f}{:>7.1f}{:<{}}  {}\n", op_name(s->node->op), s->ms, share(s->ms),
               rate_columns(node_flops(*s->node), s->ms, peak), peak ? 18 : 10, s->node->name);
  return ok_status();
}

}  // namespace

Handler add_profile_command(CLI::App& app) {
  auto opt = std::make_shared<ProfileOptions>();
  CLI::App* cmd = app.add_subcommand(
      "profile", "Show where a compiled model's time goes: per op kind and the slowest steps, with GFLOP/s");
  add_model_flags(cmd, opt->model, "an ONNX file, or a model folder or checkpoint");
  cmd->add_option("--input,-i", opt->inputs, "NAME=FILE.npy: an input tensor (random of the declared shape when omitted)");
  cmd->add_option("--dim", opt->dims, "NAME=VALUE: size of a symbolic dimension (default 1)");
  cmd->add_option("--seed", opt->seed, "seed for random inputs")->default_val(0);
  cmd->add_option("--iters", opt->iters, "profiled replays (each step's median is reported)")->default_val(5);
  cmd->add_option("--warmup", opt->warmup, "untimed replays first")->default_val(1);
  cmd->add_option("--top", opt->top, "how many of the slowest steps to list")->default_val(15);
  cmd->add_flag("--json", opt->json, "print one JSON object instead of the tables");
  cmd->add_flag("!--no-peak", opt->peak, "skip the matmul peak (measured once per machine, then cached)");
  add_pass_flags(cmd, opt->pass_flags);
  return [opt]() { return profile(*opt); };
}

}  // namespace kiln::cli
