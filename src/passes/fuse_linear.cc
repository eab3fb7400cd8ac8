// Linear fusion: MatMul by a constant [K, N] weight, Add of a constant [N]
// bias, then optionally an activation, a Mul by a gate and a residual Add
// (match.h's Epilogue), become one kiln.Linear: one GEMM (kernels/cpu/gemm.h)
// that starts each tile from the bias and applies the rest while it is in
// cache. The gate is DiT's adaLN-Zero: x + gate * Linear(h) ends each of a
// DiT block's halves, and unfused its Mul and Add each passed over the
// block's whole activations.
#include "passes/match.h"
#include "passes/pass.h"

namespace kiln {

namespace {

// The bias operand of `add` (a constant with N elements along the last
// axis only) reading `from`.
Value* bias_operand(const Node& add, const Value* from, int64_t n) {
  Value* other = add.inputs[0] == from ? add.inputs[1] : add.inputs[0];
  if (!other || !other->constant || other->constant->dtype() != DType::kF32 || other->constant->numel() != n)
    return nullptr;
  const Shape& s = other->constant->shape();
  return !s.empty() && s.back() == n ? other : nullptr;
}

}  // namespace

Status fuse_linear(Graph& graph, PassStats* stats) {
  std::vector<Node*> matmuls;
  std::map<const Node*, size_t> order;
  for (const auto& n : graph.nodes()) {
    order[n.get()] = order.size();
    if (n->op == OpKind::kMatMul) matmuls.push_back(n.get());
  }
  int64_t fused = 0, activations = 0, gates = 0, residuals = 0;
  for (Node* mm : matmuls) {
    Value *a = mm->inputs[0], *w = mm->inputs[1], *product = mm->outputs[0];
    const std::optional<Shape> as = static_shape(a), ys = static_shape(product);
    if (!w->constant || w->constant->dtype() != DType::kF32 || w->constant->rank() != 2 || !as || !ys ||
        as->size() < 2 || a->dtype != DType::kF32 || w->constant->shape()[0] == 0 || !used_once(product))
      continue;
    const int64_t n = w->constant->shape()[1];
    Node* add = product->users[0];
    Value* bias = add->op == OpKind::kAdd ? bias_operand(*add, product, n) : nullptr;
    if (!bias || static_shape(add->outputs[0]) != ys) continue;
    const Epilogue e = match_epilogue(add->outputs[0], mm, order, /*gates=*/true);
    Value* out = e.out;
    std::vector<Node*> pattern = {mm, add};
    pattern.insert(pattern.end(), e.nodes.begin(), e.nodes.end());
    Value* bias_1d = graph.add_constant(graph.unique_name(bias->name + "_1d"), bias->constant->reshaped({n}));
    std::vector<Value*> inputs = {a, w, bias_1d};
    Attributes attrs;
    set_epilogue(e, attrs, inputs);
    activations += e.activation != "none";
    gates += e.gate != nullptr;
    residuals += e.residual != nullptr;
    const std::string name = mm->name + "_linear";
    const size_t position = order[pattern.back()];  // where its output was computed
    for (Node* p : pattern) graph.remove_node(p);
    order[graph.add_node(OpKind::kLinear, name, std::move(inputs), {out}, std::move(attrs))] = position;
    ++fused;
  }
  return finish_fusion(graph, stats,
                       {{"fuse_linear", fused},
                        {"fuse_linear_activation", activations},
                        {"fuse_linear_gate", gates},
                        {"fuse_linear_residual", residuals}});
}

}  // namespace kiln
