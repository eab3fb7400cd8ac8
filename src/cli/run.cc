// kiln run MODEL: run a model once with the eager executor; print and save
// its outputs.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <random>
#include <set>

#include "cli/commands.h"
#include "npy/npy.h"
#include "cli/model_file.h"
#include "runtime/eager_executor.h"

namespace kiln::cli {

namespace {

struct RunOptions {
  std::string model;
  std::vector<std::string> inputs;  // NAME=FILE.npy
  std::vector<std::string> dims;    // NAME=VALUE
  std::string output_dir;
  uint64_t seed = 0;
  bool reference = false;
  bool op_times = false;
};

// Random values of the input's declared type: normal(0, 1) for floats,
// uniform in [0, 10) for integers, fair coin for bools.
Result<Tensor> random_tensor(DType dtype, const Shape& shape, std::mt19937_64& rng) {
  KILN_ASSIGN_OR_RETURN(Tensor t, Tensor::empty(dtype, shape));
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> small(0, 9);
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (dtype) {
      case DType::kF32: t.data<float>()[i] = normal(rng); break;
      case DType::kF64: t.data<double>()[i] = normal(rng); break;
      case DType::kF16: t.data<f16>()[i] = f32_to_f16(normal(rng)); break;
      case DType::kBF16: t.data<bf16>()[i] = f32_to_bf16(normal(rng)); break;
      case DType::kI64: t.data<int64_t>()[i] = small(rng); break;
      case DType::kI32: t.data<int32_t>()[i] = small(rng); break;
      case DType::kI8: t.data<int8_t>()[i] = int8_t(small(rng)); break;
      case DType::kU8: t.data<uint8_t>()[i] = uint8_t(small(rng)); break;
      case DType::kBool: t.data<bool>()[i] = small(rng) < 5; break;
    }
  }
  return t;
}

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

Status run_model(const RunOptions& opt) {
  KILN_ASSIGN_OR_RETURN(Graph g, load_model(opt.model));
  KILN_ASSIGN_OR_RETURN(auto dims, parse_dims(opt.dims));
  const std::set<std::string> symbols = graph_input_symbols(g);
  for (const auto& [name, size] : dims)
    if (!symbols.count(name)) return invalid_argument("--dim {}: no input of {} has a dim named '{}'", name, opt.model, name);
  NamedTensors inputs;
  std::map<std::string, std::string> sources;  // input name -> .npy file
  for (const auto& in : opt.inputs) {
    KILN_ASSIGN_OR_RETURN(auto kv, split_assignment(in, "--input"));
    if (!g.find_value(kv.first) || !g.find_value(kv.first)->is_input)
      return invalid_argument("--input {}: the model has no input named '{}'", kv.second, kv.first);
    KILN_ASSIGN_OR_RETURN(Tensor t, npy_read(kv.second));
    inputs.emplace_back(kv.first, std::move(t));
    sources[kv.first] = kv.second;
  }
  std::mt19937_64 rng(opt.seed);
  for (const Value* v : g.inputs()) {
    bool given = false;
    for (const auto& [name, t] : inputs) given |= name == v->name;
    if (given) continue;
    if (!v->shape) return invalid_argument("input '{}' has no declared shape: give it with --input", v->name);
    Shape shape;
    for (const Dim& d : *v->shape) {
      if (d.known()) {
        shape.push_back(d.value);
      } else if (auto it = dims.find(d.symbol); it != dims.end()) {
        shape.push_back(it->second);
      } else {
        fmt::print(stderr, "kiln: note: input '{}' dim '{}' set to 1 (use --dim {}=N)\n", v->name,
                   d.symbol.empty() ? "?" : d.symbol, d.symbol.empty() ? "NAME" : d.symbol);
        shape.push_back(1);
      }
    }
    KILN_ASSIGN_OR_RETURN(Tensor t, random_tensor(v->dtype, shape, rng));
    inputs.emplace_back(v->name, std::move(t));
  }
  EagerExecutor exec(g, opt.reference ? KernelSet::kReference : KernelSet::kCpu);
  exec.set_op_timing(opt.op_times);
  if (Status s = exec.check_inputs(inputs, sources); !s.ok()) return s.with_context(opt.model);
  auto run = exec.run(inputs);
  if (!run.ok()) return run.status().with_context(opt.model);
  std::vector<Tensor> outputs = std::move(run).value();
  if (opt.op_times) print_op_times(exec);
  if (!opt.output_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(opt.output_dir, ec);
    if (ec) return invalid_argument("--output-dir {}: {}", opt.output_dir, ec.message());
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    const std::string& name = g.outputs()[i]->name;
    fmt::print("{}: {}\n", name, summarize(outputs[i]));
    if (!opt.output_dir.empty()) {
      std::string path = (std::filesystem::path(opt.output_dir) / file_name_for(name)).string();
      KILN_RETURN_IF_ERROR(npy_write(path, outputs[i]));
      fmt::print("    written to {}\n", path);
    }
  }
  return ok_status();
}

}  // namespace

Handler add_run_command(CLI::App& app) {
  auto opt = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "Run a model once and print (and optionally save) its outputs");
  cmd->add_option("MODEL", opt->model, "ONNX model file")->required();
  cmd->add_option("--input,-i", opt->inputs, "NAME=FILE.npy: an input tensor (random of the declared shape when omitted)");
  cmd->add_option("--dim", opt->dims, "NAME=VALUE: size of a symbolic dimension (default 1)");
  cmd->add_option("--output-dir,-o", opt->output_dir, "write each output as DIR/<output name>.npy");
  cmd->add_option("--seed", opt->seed, "seed for random inputs")->default_val(0);
  cmd->add_flag("--reference", opt->reference, "use the reference kernels (slow; for checking)");
  cmd->add_flag("--op-times", opt->op_times, "print time per op kind (to stderr)");
  return [opt]() { return run_model(*opt); };
}

}  // namespace kiln::cli
