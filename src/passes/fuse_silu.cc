// SiLU fusion: x sigmoid(x) (and x sigmoid(a x), Swish) -> one kiln.Silu.
// Runs after fuse_gelu, which takes the a = 1.702 case (QuickGELU).
#include "passes/match.h"
#include "passes/pass.h"

namespace kiln {

Status fuse_silu(Graph& graph, PassStats* stats) {
  const Pattern silu = either({
      op(OpKind::kMul, {capture(), op(OpKind::kSigmoid, {capture()})}),
      op(OpKind::kMul, {capture(), op(OpKind::kSigmoid, {op(OpKind::kMul, {capture(), any_constant()})})}),
  });
  std::vector<Node*> muls;
  for (const auto& n : graph.nodes())
    if (n->op == OpKind::kMul) muls.push_back(n.get());
  int64_t fused = 0;
  for (Node* mul : muls) {
    Value* out = mul->outputs[0];
    if (out->producer != mul || out->dtype != DType::kF32) continue;  // already fused away
    Match m;
    if (!match(out, silu, m) || m.x->dtype != DType::kF32) continue;
    Attributes attrs;
    attrs.set("alpha", m.constants.empty() ? 1.0f : float(m.constants[0]));
    replace_match(graph, m, out, OpKind::kSilu, mul->name + "_silu", std::move(attrs));
    ++fused;
  }
  graph.compact();
  KILN_RETURN_IF_ERROR(graph.topo_sort());
  if (stats) stats->add("fuse_silu", fused);
  return ok_status();
}

}  // namespace kiln
