// Dead-code elimination: a node stays only if a graph output depends on it.
#include <unordered_set>

#include "passes/pass.h"

namespace kiln {

Status eliminate_dead_code(Graph& graph, PassStats* stats) {
  // Walk backwards from the outputs, marking every producer reached.
  std::unordered_set<const Node*> live;
  std::vector<const Value*> work(graph.outputs().begin(), graph.outputs().end());
  while (!work.empty()) {
    const Value* v = work.back();
    work.pop_back();
    if (!v->producer || !live.insert(v->producer).second) continue;
    for (const Value* in : v->producer->inputs)
      if (in) work.push_back(in);
  }
  std::vector<Node*> dead;
  for (const auto& n : graph.nodes())
    if (!live.count(n.get())) dead.push_back(n.get());
  for (Node* n : dead) graph.remove_node(n);
  graph.compact();
  if (stats) stats->add("eliminate_dead_code", int64_t(dead.size()));
  return ok_status();
}

}  // namespace kiln
