// GELU fusion: the three forms exporters write, each becomes one kiln.Gelu.
//
//   exact (torch GELU):        x/2 (1 + erf(x / sqrt2))               approximate=none
//   tanh (GELU(tanh), DiT):    x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))   approximate=tanh
//   quick (CLIP's QuickGELU):  x sigmoid(1.702 x)                      approximate=sigmoid
//
// The 1/2 and x factors are matched in any grouping: (x u) / 2, x (u / 2)
// and (x / 2) u, where u = 1 + erf(...) or 1 + tanh(...).
#include "passes/match.h"
#include "passes/pass.h"

namespace kiln {

namespace {

// x/2 times u, in each grouping torch and hand-written models produce.
Pattern half_x_times(const Pattern& u) {
  return either({
      op(OpKind::kMul, {op(OpKind::kMul, {capture(), u}), constant(0.5)}),
      op(OpKind::kMul, {capture(), op(OpKind::kMul, {u, constant(0.5)})}),
      op(OpKind::kMul, {op(OpKind::kMul, {capture(), constant(0.5)}), u}),
      op(OpKind::kDiv, {op(OpKind::kMul, {capture(), u}), constant(2.0)}),
  });
}

Pattern exact_gelu() {
  const Pattern scaled = either({op(OpKind::kDiv, {capture(), constant(1.4142135623730951)}),
                                 op(OpKind::kMul, {capture(), constant(0.7071067811865476)})});
  return half_x_times(op(OpKind::kAdd, {op(OpKind::kErf, {scaled}), constant(1.0)}));
}

Pattern tanh_gelu() {
  const Pattern cube = either({op(OpKind::kPow, {capture(), constant(3.0)}),
                               op(OpKind::kMul, {capture(), op(OpKind::kMul, {capture(), capture()})}),
                               op(OpKind::kMul, {op(OpKind::kMul, {capture(), capture()}), capture()})});
  const Pattern inner = op(OpKind::kAdd, {capture(), op(OpKind::kMul, {cube, constant(0.044715)})});
  const Pattern scaled = op(OpKind::kMul, {inner, constant(0.7978845608028654)});
  return half_x_times(op(OpKind::kAdd, {op(OpKind::kTanh, {scaled}), constant(1.0)}));
}

Pattern quick_gelu() {
  return op(OpKind::kMul, {capture(), op(OpKind::kSigmoid, {op(OpKind::kMul, {capture(), constant(1.702)})})});
}

}  // namespace

Status fuse_gelu(Graph& graph, PassStats* stats) {
  const std::pair<const char*, Pattern> forms[] = {
      {"none", exact_gelu()}, {"tanh", tanh_gelu()}, {"sigmoid", quick_gelu()}};
  const std::vector<Node*> roots = nodes_of(graph, {OpKind::kMul, OpKind::kDiv});
  int64_t fused = 0;
  for (Node* root : roots) {
    Value* out = root->outputs[0];
    if (out->producer != root || out->dtype != DType::kF32) continue;  // already fused away
    for (const auto& [form, pattern] : forms) {
      Match m;
      if (!match(out, pattern, m) || m.x->dtype != DType::kF32) continue;
      Attributes attrs;
      attrs.set("approximate", std::string(form));
      replace_match(graph, m, out, OpKind::kGelu, root->name + "_gelu", std::move(attrs));
      ++fused;
      break;
    }
  }
  return finish_fusion(graph, stats, {{"fuse_gelu", fused}});
}

}  // namespace kiln
