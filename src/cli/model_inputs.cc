#include "cli/model_inputs.h"

#include <fmt/format.h>

#include <random>
#include <set>

#include "cli/model_file.h"
#include "npy/npy.h"

namespace kiln::cli {

namespace {

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

}  // namespace

Result<ModelInputs> gather_inputs(const Graph& graph, const std::string& model,
                                  const std::vector<std::string>& input_flags,
                                  const std::vector<std::string>& dim_flags,
                                  const std::map<std::string, int64_t>& defaults, uint64_t seed) {
  KILN_ASSIGN_OR_RETURN(auto dims, parse_dims(dim_flags));
  const std::set<std::string> symbols = graph_input_symbols(graph);
  for (const auto& [name, size] : dims)
    if (!symbols.count(name)) return invalid_argument("--dim {}: no input of {} has a dim named '{}'", name, model, name);
  ModelInputs out;
  NamedTensors inputs;
  for (const auto& in : input_flags) {
    KILN_ASSIGN_OR_RETURN(auto kv, split_assignment(in, "--input"));
    if (!graph.find_value(kv.first) || !graph.find_value(kv.first)->is_input)
      return invalid_argument("--input {}: the model has no input named '{}'", kv.second, kv.first);
    KILN_ASSIGN_OR_RETURN(Tensor t, npy_read(kv.second));
    inputs.emplace_back(kv.first, std::move(t));
    out.sources[kv.first] = kv.second;
  }
  std::mt19937_64 rng(seed);
  for (const Value* v : graph.inputs()) {
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
      } else if (auto usual = defaults.find(d.symbol); usual != defaults.end()) {
        fmt::print(stderr, "kiln: note: input '{}' dim '{}' set to {}, the model's usual size (use --dim {}=N)\n",
                   v->name, d.symbol, usual->second, d.symbol);
        shape.push_back(usual->second);
        dims[d.symbol] = usual->second;  // the other inputs sharing it agree
      } else {
        fmt::print(stderr, "kiln: note: input '{}' dim '{}' set to 1 (use --dim {}=N)\n", v->name,
                   d.symbol.empty() ? "?" : d.symbol, d.symbol.empty() ? "NAME" : d.symbol);
        shape.push_back(1);
      }
    }
    KILN_ASSIGN_OR_RETURN(Tensor t, random_tensor(v->dtype, shape, rng));
    inputs.emplace_back(v->name, std::move(t));
  }
  // Graph input order, so one signature always reads the same.
  for (const Value* v : graph.inputs())
    for (auto& [name, t] : inputs)
      if (name == v->name) out.tensors.emplace_back(name, std::move(t));
  return out;
}

}  // namespace kiln::cli
