// Linear fusion: MatMul by a constant [K, N] weight, Add of a constant [N]
// bias, then optionally an activation (kiln.Gelu, kiln.Silu, Relu) and a
// residual Add, become one kiln.Linear: one oneDNN matmul whose bias and
// post-ops do the rest while the output tile is still in registers.
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

// The activation attributes for a node that kiln.Linear can apply, if any.
std::optional<std::pair<std::string, float>> activation_of(const Node& n) {
  if (n.op == OpKind::kRelu) return std::pair{std::string("relu"), 0.0f};
  if (n.op == OpKind::kSilu) return std::pair{std::string("swish"), n.attrs.get_float("alpha", 1.0f)};
  if (n.op != OpKind::kGelu) return std::nullopt;
  const std::string form = n.attrs.get_string("approximate", "none");
  if (form == "sigmoid") return std::pair{std::string("swish"), 1.702f};  // x sigmoid(1.702 x)
  return std::pair{std::string(form == "tanh" ? "gelu_tanh" : "gelu"), 0.0f};
}

}  // namespace

Status fuse_linear(Graph& graph, PassStats* stats) {
  std::vector<Node*> matmuls;
  std::map<const Node*, size_t> order;
  for (const auto& n : graph.nodes()) {
    order[n.get()] = order.size();
    if (n->op == OpKind::kMatMul) matmuls.push_back(n.get());
  }
  int64_t fused = 0, activations = 0, residuals = 0;
  for (Node* mm : matmuls) {
    Value *a = mm->inputs[0], *w = mm->inputs[1], *out = mm->outputs[0];
    const std::optional<Shape> as = static_shape(a), ys = static_shape(out);
    if (!w->constant || w->constant->dtype() != DType::kF32 || w->constant->rank() != 2 || !as || !ys ||
        as->size() < 2 || a->dtype != DType::kF32 || w->constant->shape()[0] == 0 || !used_once(out))
      continue;
    const int64_t n = w->constant->shape()[1];
    Node* add = out->users[0];
    Value* bias = add->op == OpKind::kAdd ? bias_operand(*add, out, n) : nullptr;
    if (!bias || static_shape(add->outputs[0]) != ys) continue;
    std::vector<Node*> pattern = {mm, add};
    out = add->outputs[0];
    Attributes attrs;
    attrs.set("activation", std::string("none"));
    if (used_once(out))
      if (auto act = activation_of(*out->users[0])) {
        attrs.set("activation", act->first);
        attrs.set("alpha", act->second);
        pattern.push_back(out->users[0]);
        out = out->users[0]->outputs[0];
        ++activations;
      }
    // A residual: the other operand of a following Add, same shape, computed
    // before the MatMul in the original order (so it cannot depend on this
    // Linear); a node this pass made counts where its last node was.
    Value* residual = nullptr;
    if (used_once(out) && out->users[0]->op == OpKind::kAdd) {
      Node* res_add = out->users[0];
      Value* other = res_add->inputs[0] == out ? res_add->inputs[1] : res_add->inputs[0];
      const bool earlier = !other->producer || (order.count(other->producer) && order[other->producer] < order[mm]);
      if (other != out && other->dtype == DType::kF32 && static_shape(other) == ys && earlier) {
        residual = other;
        pattern.push_back(res_add);
        out = res_add->outputs[0];
        ++residuals;
      }
    }
    Tensor flat_bias = bias->constant->reshaped({n});
    Value* bias_1d = graph.add_constant(graph.unique_name(bias->name + "_1d"), flat_bias);
    std::vector<Value*> inputs = {a, w, bias_1d};
    if (residual) inputs.push_back(residual);
    const std::string name = mm->name + "_linear";
    const size_t position = order[pattern.back()];  // where its output was computed
    for (Node* p : pattern) graph.remove_node(p);
    order[graph.add_node(OpKind::kLinear, name, std::move(inputs), {out}, std::move(attrs))] = position;
    ++fused;
  }
  return finish_fusion(graph, stats,
                       {{"fuse_linear", fused}, {"fuse_linear_activation", activations}, {"fuse_linear_residual", residuals}});
}

}  // namespace kiln
