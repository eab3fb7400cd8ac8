// Shape specialization: the input signature becomes part of the graph.
#include "passes/pass.h"

namespace kiln {

Status specialize_shapes(Graph& graph, const std::map<std::string, int64_t>& dims) {
  const std::set<std::string> symbols = graph_input_symbols(graph);
  for (const auto& [name, size] : dims)
    if (!symbols.count(name)) return invalid_argument("no input has a dim named '{}'", name);
  for (Value* in : graph.inputs()) {
    if (!in->shape) continue;
    for (Dim& d : *in->shape) {
      if (d.known()) continue;
      auto it = dims.find(d.symbol);
      if (it == dims.end())
        return invalid_argument("input '{}': give a size for dim '{}'", in->name,
                                d.symbol.empty() ? "?" : d.symbol);
      if (it->second < 0) return invalid_argument("dim '{}' must not be negative", d.symbol);
      d = Dim(it->second);
    }
  }
  // Node outputs keep shapes from import; infer them all again from the
  // concrete inputs.
  for (const auto& n : graph.nodes())
    for (Value* out : n->outputs)
      if (out) out->shape.reset();
  return graph_infer_shapes(graph);
}

}  // namespace kiln
