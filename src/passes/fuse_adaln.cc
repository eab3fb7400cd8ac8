// adaLN fusion (DiT): the modulation x·(1 + scale) + shift that follows a
// LayerNorm without affine, with per-sample scale and shift [B, 1, C],
//
//   n = LayerNormalization(x, ones, zeros);  y = Add(Mul(n, m), shift)
//
// becomes one kiln.ModulatedLayerNorm(x, m, shift): the normalized tensor
// is never written. (m is 1 + scale, computed once per sample elsewhere.)
#include "passes/match.h"
#include "passes/pass.h"

namespace kiln {

namespace {

// The operand of binary `n` other than `from`, if it is a per-sample row
// [B, 1, C] or a shared [C] for x of shape [B, S, C].
Value* modulation(const Node& n, const Value* from, const Shape& x) {
  Value* other = n.inputs[0] == from ? n.inputs[1] : n.inputs[0];
  const std::optional<Shape> s = static_shape(other);
  if (!s || other == from || other->dtype != DType::kF32) return nullptr;
  const bool per_sample = *s == Shape{x[0], 1, x[2]}, shared = *s == Shape{x[2]};
  return per_sample || shared ? other : nullptr;
}

}  // namespace

Status fuse_adaln(Graph& graph, PassStats* stats) {
  const std::vector<Node*> norms = nodes_of(graph, {OpKind::kLayerNormalization});
  int64_t fused = 0;
  for (Node* ln : norms) {
    const std::optional<Shape> x = static_shape(ln->inputs[0]);
    const int64_t axis = ln->attrs.get_int("axis", -1);
    Value* normed = ln->outputs[0];
    if (!x || x->size() != 3 || (axis != -1 && axis != 2) || ln->outputs.size() > 1 || !used_once(normed)) continue;
    if (!filled_with(ln->input(1), 1.0) || (ln->input(2) && !filled_with(ln->input(2), 0.0))) continue;
    Node* mul = normed->users[0];
    Value* scale = mul->op == OpKind::kMul ? modulation(*mul, normed, *x) : nullptr;
    if (!scale || !used_once(mul->outputs[0])) continue;
    Node* add = mul->outputs[0]->users[0];
    Value* shift = add->op == OpKind::kAdd ? modulation(*add, mul->outputs[0], *x) : nullptr;
    if (!shift) continue;
    Attributes attrs;
    attrs.set("epsilon", ln->attrs.get_float("epsilon", 1e-5f));
    Value* out = add->outputs[0];
    Value* in = ln->inputs[0];
    const std::string name = ln->name + "_adaln";
    for (Node* n : {ln, mul, add}) graph.remove_node(n);
    graph.add_node(OpKind::kModulatedLayerNorm, name, {in, scale, shift}, {out}, std::move(attrs));
    ++fused;
  }
  return finish_fusion(graph, stats, {{"fuse_adaln", fused}});
}

}  // namespace kiln
