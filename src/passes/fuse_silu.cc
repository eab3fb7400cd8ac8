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
  const std::vector<Node*> muls = nodes_of(graph, {OpKind::kMul});
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
  return finish_fusion(graph, stats, {{"fuse_silu", fused}});
}

}  // namespace kiln
