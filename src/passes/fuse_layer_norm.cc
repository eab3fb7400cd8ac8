// LayerNorm fusion. torch.onnx at opsets < 17 exports LayerNorm decomposed:
//
//   m = ReduceMean(x, axes=[-1]);  d = Sub(x, m)
//   v = ReduceMean(Pow(d, 2), axes=[-1]);  s = Sqrt(Add(v, eps))
//   y = Div(d, s)  [ -> Mul(y, gamma) -> Add(., beta) ]
//
// Matched from the Div backwards; becomes one LayerNormalization(x, gamma,
// beta, axis=-1, epsilon=eps). Without an affine tail (DiT's adaLN norms),
// gamma and beta are ones and zeros.
#include "passes/match.h"
#include "passes/pass.h"

namespace kiln {

namespace {

// ReduceMean over the last axis only, keeping dims (axes as attribute or,
// from opset 18, as a constant input).
bool reduces_last_axis(const Node& n, const Value* x) {
  if (n.attrs.get_int("keepdims", 1) != 1 || !x->shape) return false;
  const std::vector<int64_t>* attr = n.attrs.get_ints("axes");
  std::vector<int64_t> axes;
  if (attr) axes = *attr;
  else if (n.input(1) && n.input(1)->constant)
    for (int64_t i = 0; i < n.input(1)->constant->numel(); ++i) axes.push_back(n.input(1)->constant->element_as_int(i));
  const int64_t rank = int64_t(x->shape->size());
  return axes.size() == 1 && (axes[0] == -1 || axes[0] == rank - 1);
}

// A constant 1-D [C] tensor (gamma or beta); the other operand of `n`.
Value* affine_operand(const Node& n, const Value* from, int64_t channels) {
  Value* other = n.inputs[0] == from ? n.inputs[1] : n.inputs[0];
  if (!other || !other->constant || other->constant->dtype() != DType::kF32) return nullptr;
  const Shape& s = other->constant->shape();
  return s.size() == 1 && s[0] == channels ? other : nullptr;
}

}  // namespace

Status fuse_layer_norm(Graph& graph, PassStats* stats) {
  const std::vector<Node*> divs = nodes_of(graph, {OpKind::kDiv});
  int64_t fused = 0;
  for (Node* div : divs) {
    Node* sub = producer_of(div->inputs[0], OpKind::kSub);
    Node* sqrt = producer_of(div->inputs[1], OpKind::kSqrt);
    if (!sub || !sqrt || !used_once(div->inputs[1])) continue;
    Value* x = sub->inputs[0];
    Node* mean = producer_of(sub->inputs[1], OpKind::kReduceMean);
    if (!mean || mean->inputs[0] != x || !used_once(sub->inputs[1]) || !reduces_last_axis(*mean, x)) continue;
    if (x->dtype != DType::kF32 || !x->shape || x->shape->empty() || !x->shape->back().known()) continue;
    const int64_t channels = x->shape->back().value;
    Node* add_eps = producer_of(sqrt->inputs[0], OpKind::kAdd);
    if (!add_eps || !used_once(sqrt->inputs[0])) continue;
    Node* var = producer_of(add_eps->inputs[0], OpKind::kReduceMean);
    std::optional<double> eps = scalar_constant(add_eps->inputs[1]);
    if (!var || !eps || !used_once(add_eps->inputs[0]) || !reduces_last_axis(*var, x)) continue;
    Node* pow = producer_of(var->inputs[0], OpKind::kPow);
    if (!pow || pow->inputs[0] != sub->outputs[0] || scalar_constant(pow->inputs[1]) != 2.0 ||
        !used_once(var->inputs[0]))
      continue;
    // d feeds exactly the Pow and the Div.
    if (sub->outputs[0]->users.size() != 2 || sub->outputs[0]->is_output) continue;

    // The optional affine tail: Mul by gamma, then Add of beta.
    std::vector<Node*> pattern = {mean, sub, pow, var, add_eps, sqrt, div};
    Value* out = div->outputs[0];
    Value* gamma = nullptr;
    Value* beta = nullptr;
    if (used_once(out) && out->users[0]->op == OpKind::kMul &&
        (gamma = affine_operand(*out->users[0], out, channels))) {
      Node* mul = out->users[0];
      pattern.push_back(mul);
      out = mul->outputs[0];
      if (used_once(out) && out->users[0]->op == OpKind::kAdd &&
          (beta = affine_operand(*out->users[0], out, channels))) {
        pattern.push_back(out->users[0]);
        out = out->users[0]->outputs[0];
      }
    }

    std::string name = div->name + "_layer_norm";
    if (!gamma) gamma = filled_constant(graph, name + "_scale", channels, 1.0f);
    if (!beta) beta = filled_constant(graph, name + "_bias", channels, 0.0f);
    for (Node* n : pattern) graph.remove_node(n);
    Attributes attrs;
    attrs.set("axis", int64_t(-1));
    attrs.set("epsilon", float(*eps));
    graph.add_node(OpKind::kLayerNormalization, name, {x, gamma, beta}, {out}, std::move(attrs));
    ++fused;
  }
  return finish_fusion(graph, stats, {{"fuse_layer_norm", fused}});
}

}  // namespace kiln
