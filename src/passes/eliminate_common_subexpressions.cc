// Common-subexpression elimination: torch exports repeat the same shape
// arithmetic (Shape(x), Gather(Shape(x), 0), ...) once per use; computing it
// once is cheaper, and later fusions see one producer.
#include <unordered_map>

#include "passes/pass.h"

namespace kiln {

namespace {

// A key equal for nodes that surely compute the same thing; nullopt for
// nodes that are not merged (tensor attributes are not compared byte-wise).
std::optional<std::string> node_key(const Node& n) {
  std::string key = fmt::format("{}(", int(n.op));
  for (const Value* in : n.inputs) key += in ? fmt::format("{},", in->id) : std::string("_,");
  key += ")";
  for (const auto& [name, value] : n.attrs.items()) {
    if (std::holds_alternative<Tensor>(value)) return std::nullopt;
    key += fmt::format("{}={};", name, attribute_to_string(value));
  }
  return fmt::format("{}#{}", key, n.outputs.size());
}

// Small constants with equal contents (the scalars exports sprinkle
// everywhere) become one value, so nodes reading them can merge too.
int64_t merge_equal_constants(Graph& graph) {
  constexpr size_t kMaxBytes = 256;
  std::unordered_map<std::string, Value*> canonical;
  std::vector<Value*> constants;
  for (const auto& v : graph.values())
    if (v->constant && !v->is_output && v->constant->nbytes() <= kMaxBytes) constants.push_back(v.get());
  int64_t merged = 0;
  for (Value* v : constants) {
    const Tensor& t = *v->constant;
    std::string key = fmt::format("{}{}", dtype_name(t.dtype()), shape_to_string(t.shape()));
    key.append(static_cast<const char*>(t.raw()), t.nbytes());
    auto [it, fresh] = canonical.emplace(std::move(key), v);
    if (fresh || v->users.empty()) continue;
    graph.replace_all_uses(v, it->second);
    ++merged;
  }
  return merged;
}

}  // namespace

Status eliminate_common_subexpressions(Graph& graph, PassStats* stats) {
  int64_t merged = merge_equal_constants(graph);
  std::unordered_map<std::string, Node*> seen;
  std::vector<Node*> nodes;
  for (const auto& n : graph.nodes()) nodes.push_back(n.get());
  for (Node* n : nodes) {
    auto key = node_key(*n);
    if (!key) continue;
    auto [it, fresh] = seen.emplace(*key, n);
    if (fresh) continue;
    Node* kept = it->second;
    for (size_t i = 0; i < n->outputs.size(); ++i)
      if (n->outputs[i] && kept->outputs[i]) graph.replace_all_uses(n->outputs[i], kept->outputs[i]);
    bool any_output_used = false;
    for (const Value* out : n->outputs) any_output_used |= out && (!out->users.empty() || out->is_output);
    if (!any_output_used) {
      graph.remove_node(n);
      ++merged;
    }
  }
  graph.compact();
  if (stats) stats->add("eliminate_common_subexpressions", merged);
  return ok_status();
}

}  // namespace kiln
