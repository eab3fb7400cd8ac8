// kiln run MODEL: run a model once (a compiled plan by default, or eager, or
// auto); print and save its outputs.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>

#include "cli/commands.h"
#include "npy/npy.h"
#include "cli/model_file.h"
#include "cli/model_inputs.h"
#include "cli/pass_flags.h"
#include "cli/plan_files.h"
#include "core/mapped_file.h"
#include "runtime/model_runner.h"

namespace kiln::cli {

namespace {

struct RunOptions {
  ModelRef model;
  std::vector<std::string> inputs;  // NAME=FILE.npy
  std::vector<std::string> dims;    // NAME=VALUE
  std::string output_dir;
  uint64_t seed = 0;
  std::string mode = "graph";
  PassFlags pass_flags;
  bool reference = false;
  bool op_times = false;
  bool profile = false;
  std::string profile_json, trace;
};

std::string summarize(const Tensor& t) {
  std::string head;
  int64_t shown = std::min<int64_t>(t.numel(), 6);
  for (int64_t i = 0; i < shown; ++i) head += fmt::format("{}{:.6g}", i ? ", " : "", t.element_as_double(i));
  if (t.numel() > shown) head += ", ...";
  double lo = 0, hi = 0, sum = 0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    double v = t.element_as_double(i);
    lo = i ? std::min(lo, v) : v;
    hi = i ? std::max(hi, v) : v;
    sum += v;
  }
  return fmt::format("{}{}  min {:.6g}  max {:.6g}  mean {:.6g}\n    [{}]", dtype_name(t.dtype()),
                     shape_to_string(t.shape()), lo, hi, t.numel() ? sum / double(t.numel()) : 0.0, head);
}

std::string file_name_for(const std::string& value_name) {
  std::string out = value_name;
  for (char& c : out)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
  return out + ".npy";
}

void print_op_times(const EagerExecutor& exec) {
  std::vector<std::pair<double, int>> rows;
  double total = 0;
  for (int op = 0; op < kOpCount; ++op) {
    const auto& t = exec.op_times()[size_t(op)];
    if (t.calls) rows.emplace_back(t.seconds, op), total += t.seconds;
  }
  std::sort(rows.rbegin(), rows.rend());
  fmt::print(stderr, "{:<24}{:>8}{:>12}{:>8}\n", "op", "calls", "ms", "%");
  for (const auto& [sec, op] : rows)
    fmt::print(stderr, "{:<24}{:>8}{:>12.3f}{:>8.1f}\n", op_name(OpKind(op)),
               exec.op_times()[size_t(op)].calls, sec * 1e3, 100 * sec / total);
  fmt::print(stderr, "{:<24}{:>8}{:>12.3f}\n", "total", "", total * 1e3);
}

// --profile (a table on stderr, --op-times adding the per-op rows),
// --profile-json FILE and --trace FILE.
Status write_profile(const RunOptions& opt, const RunReport& report) {
  if (opt.profile || opt.op_times) fmt::print(stderr, "{}", report_table(report));
  if (!opt.profile_json.empty()) KILN_RETURN_IF_ERROR(write_file(opt.profile_json, report_json(report).dump(2) + "\n"));
  if (!opt.trace.empty()) KILN_RETURN_IF_ERROR(write_file(opt.trace, chrome_trace(report)));
  return ok_status();
}

template <typename Values>  // Graph's or Plan's outputs()
std::vector<std::string> output_names(const Values& outputs) {
  std::vector<std::string> names;
  for (const auto* v : outputs) names.push_back(v->name);
  return names;
}

// Prints each output and, with --output-dir, saves it as .npy.
Status report_outputs(const RunOptions& opt, const std::vector<std::string>& names,
                      const std::vector<Tensor>& outputs) {
  if (!opt.output_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(opt.output_dir, ec);
    if (ec) return invalid_argument("--output-dir {}: {}", opt.output_dir, ec.message());
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    const std::string& name = names[i];
    fmt::print("{}: {}\n", name, summarize(outputs[i]));
    if (!opt.output_dir.empty()) {
      std::string path = (std::filesystem::path(opt.output_dir) / file_name_for(name)).string();
      KILN_RETURN_IF_ERROR(npy_write(path, outputs[i]));
      fmt::print("    written to {}\n", path);
    }
  }
  return ok_status();
}

// A .kplan: already compiled for one signature, so graph mode only.
Status run_plan_file(const RunOptions& opt) {
  if (opt.mode != "graph" || opt.reference || !opt.pass_flags.fusion_switch.empty() || !opt.dims.empty() ||
      opt.pass_flags.precision != "f32" || !opt.pass_flags.precision_policy.empty())
    return invalid_argument("{}: a .kplan runs as compiled (graph mode, fixed shapes, its precision): give the ONNX "
                            "model for --mode, --reference, --fusion-switch, --precision or --dim", opt.model.path);
  RunReport report{.mode = "graph", .plan_cache_hit = true, .plan_hits = 1};  // the on-disk cache
  auto start = std::chrono::steady_clock::now();
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<Plan> plan, load_plan_file(opt.model.path));
  report.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  report.signature = plan->signature();
  report.flops = plan->stats().flops;
  KILN_ASSIGN_OR_RETURN(ModelInputs inputs, gather_inputs(plan->graph(), opt.model.path, opt.inputs, {}, {}, opt.seed));
  start = std::chrono::steady_clock::now();
  for (const auto& [name, t] : inputs.tensors) {
    Status s = plan->bind_input(name, t.view());
    if (!s.ok()) return s.with_context(inputs.sources.count(name) ? opt.model.path + ": " + inputs.sources[name] : opt.model.path);
  }
  report.bind_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  RunProfile steps;
  start = std::chrono::steady_clock::now();
  if (Status s = plan->run(opt.op_times || !opt.trace.empty() ? &steps : nullptr); !s.ok()) return s.with_context(opt.model.path);
  report.run_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  report.steps = std::move(steps.steps);
  KILN_RETURN_IF_ERROR(write_profile(opt, report));
  std::vector<Tensor> outputs;
  for (size_t i = 0; i < plan->outputs().size(); ++i) {
    const TensorView& v = plan->output(i);
    outputs.emplace_back(v.dtype, v.shape, v.data, plan);
  }
  return report_outputs(opt, output_names(plan->outputs()), outputs);
}

Status run_model(const RunOptions& opt) {
  if (looks_like_plan_file(opt.model.path)) return run_plan_file(opt);
  ModelRef model = opt.model;
  KILN_ASSIGN_OR_RETURN(model.sizes, parse_dims(opt.dims));
  std::map<std::string, int64_t> default_dims;
  KILN_ASSIGN_OR_RETURN(Graph g, load_model(model, &default_dims));
  const std::string label = opt.model.label();
  KILN_ASSIGN_OR_RETURN(ExecutionMode mode, parse_execution_mode(opt.mode));
  KILN_ASSIGN_OR_RETURN(PassOptions passes, pass_options(opt.pass_flags));
  KILN_ASSIGN_OR_RETURN(ModelInputs inputs, gather_inputs(g, label, opt.inputs, input_dim_flags(model, opt.dims), default_dims, opt.seed));
  std::vector<Tensor> outputs;
  if (opt.reference || (opt.op_times && mode == ExecutionMode::kEager)) {
    if (mode != ExecutionMode::kEager) return invalid_argument("--reference runs the eager executor: add --mode eager");
    if (Status s = assign_precision(g, passes.precision, nullptr); !s.ok()) return s.with_context(label);
    EagerExecutor exec(g, opt.reference ? KernelSet::kReference : KernelSet::kCpu);
    exec.set_op_timing(opt.op_times);
    if (Status s = exec.check_inputs(inputs.tensors, inputs.sources); !s.ok()) return s.with_context(label);
    auto run = exec.run(inputs.tensors);
    if (!run.ok()) return run.status().with_context(label);
    outputs = std::move(run).value();
    if (opt.op_times) print_op_times(exec);
  } else {
    {
      EagerExecutor check(g);  // the same messages, naming the input files, as eager mode
      if (Status s = check.check_inputs(inputs.tensors, inputs.sources); !s.ok()) return s.with_context(label);
    }
    RunnerOptions options{.mode = mode, .passes = passes, .profile_steps = opt.op_times || !opt.trace.empty()};
    options.log = [](const std::string& line) { fmt::print(stderr, "kiln: {}\n", line); };
    // The graph read above is the runner's first load, not a copy of the
    // weights kept beside the runner's.
    const std::vector<std::string> names = output_names(g.outputs());
    KILN_ASSIGN_OR_RETURN(auto runner,
                          ModelRunner::create([&] { return load_model(model); }, options, std::move(g)));
    auto run = runner->run(inputs.tensors);
    if (!run.ok()) return run.status().with_context(label);
    KILN_RETURN_IF_ERROR(write_profile(opt, runner->last_report()));
    return report_outputs(opt, names, std::move(run).value());
  }
  return report_outputs(opt, output_names(g.outputs()), outputs);
}

}  // namespace

Handler add_run_command(CLI::App& app) {
  auto opt = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "Run a model once and print (and optionally save) its outputs");
  add_model_flags(cmd, opt->model, "an ONNX file, a model folder or checkpoint, or a .kplan from kiln compile");
  cmd->add_option("--input,-i", opt->inputs, "NAME=FILE.npy: an input tensor (random of the declared shape when omitted)");
  cmd->add_option("--dim", opt->dims, "NAME=VALUE: size of a symbolic dimension (default 1)");
  cmd->add_option("--output-dir,-o", opt->output_dir, "write each output as DIR/<output name>.npy");
  cmd->add_option("--seed", opt->seed, "seed for random inputs")->default_val(0);
  cmd->add_option("--mode", opt->mode, "eager | graph (a compiled plan) | auto (times both, keeps the faster)")
      ->default_val("graph");
  add_pass_flags(cmd, opt->pass_flags);
  cmd->add_flag("--reference", opt->reference, "use the reference kernels (slow; for checking)");
  cmd->add_flag("--op-times", opt->op_times, "print time per op kind (to stderr)");
  cmd->add_flag("--profile", opt->profile, "print where the time went: compile, plan cache, bind, run, clone, GFLOP/s");
  cmd->add_option("--profile-json", opt->profile_json, "write the profile as JSON to FILE");
  cmd->add_option("--trace", opt->trace, "write a Chrome trace (chrome://tracing, ui.perfetto.dev) to FILE");
  return [opt]() { return run_model(*opt); };
}

}  // namespace kiln::cli
