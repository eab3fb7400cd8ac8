// GroupNorm fusion. torch.onnx (opsets < 18) exports nn.GroupNorm as
//
//   r = Reshape(x, [N, G, -1]);  n = InstanceNormalization(r, ones[G], zeros[G], eps)
//   y = Reshape(n, shape(x))  [ -> Mul(y, gamma[C,1,..]) -> Add(., beta[C,1,..]) ]
//
// which becomes one kiln.GroupNorm(x, gamma, beta). A kiln.Silu that alone
// reads the result (SD's ResNet blocks: GroupNorm then SiLU) is folded in as
// activation=silu, so the normalized tensor is written once.
#include "passes/match.h"
#include "passes/pass.h"

namespace kiln {

namespace {

// A per-channel constant as [C]: shape [C], [C,1,..,1] or [1,C,1,..,1].
std::optional<Tensor> per_channel(const Value* v, int64_t channels, size_t rank) {
  if (!v || !v->constant || v->constant->dtype() != DType::kF32 || v->constant->numel() != channels)
    return std::nullopt;
  const Shape& s = v->constant->shape();
  const bool ok = s.size() == 1 || (s.size() == rank - 1 && s[0] == channels) ||
                  (s.size() == rank && s[0] == 1 && s[1] == channels);
  if (!ok) return std::nullopt;
  return v->constant->reshaped({channels});
}

// The other operand of a binary node `n` reading `from`, if it is a
// per-channel constant.
std::optional<Tensor> channel_operand(const Node& n, const Value* from, int64_t channels, size_t rank) {
  const Value* other = n.inputs[0] == from ? n.inputs[1] : n.inputs[0];
  return per_channel(other, channels, rank);
}

}  // namespace

Status fuse_group_norm(Graph& graph, PassStats* stats) {
  const std::vector<Node*> norms = nodes_of(graph, {OpKind::kInstanceNormalization});
  int64_t fused = 0, with_silu = 0;
  for (Node* norm : norms) {
    Node* split = producer_of(norm->inputs[0], OpKind::kReshape);
    if (!split || !used_once(norm->inputs[0]) || !used_once(norm->outputs[0])) continue;
    Value* x = split->inputs[0];
    const std::optional<Shape> xs = static_shape(x), rs = static_shape(norm->inputs[0]);
    if (x->dtype != DType::kF32 || !xs || !rs || xs->size() < 3 || rs->size() != 3) continue;
    const int64_t batch = (*xs)[0], channels = (*xs)[1], groups = (*rs)[1];
    if ((*rs)[0] != batch || groups < 1 || channels % groups != 0) continue;
    if (!filled_with(norm->inputs[1], 1.0) || !filled_with(norm->inputs[2], 0.0)) continue;
    Node* merge = norm->outputs[0]->users[0];
    if (merge->op != OpKind::kReshape || static_shape(merge->outputs[0]) != xs) continue;

    std::vector<Node*> pattern = {split, norm, merge};
    Value* out = merge->outputs[0];
    std::optional<Tensor> gamma, beta;
    if (used_once(out) && out->users[0]->op == OpKind::kMul &&
        (gamma = channel_operand(*out->users[0], out, channels, xs->size()))) {
      pattern.push_back(out->users[0]);
      out = out->users[0]->outputs[0];
      if (used_once(out) && out->users[0]->op == OpKind::kAdd &&
          (beta = channel_operand(*out->users[0], out, channels, xs->size()))) {
        pattern.push_back(out->users[0]);
        out = out->users[0]->outputs[0];
      }
    }
    Attributes attrs;
    attrs.set("num_groups", groups);
    attrs.set("epsilon", norm->attrs.get_float("epsilon", 1e-5f));
    attrs.set("activation", std::string("none"));
    if (used_once(out) && out->users[0]->op == OpKind::kSilu && out->users[0]->attrs.get_float("alpha", 1) == 1.0f) {
      pattern.push_back(out->users[0]);
      out = out->users[0]->outputs[0];
      attrs.set("activation", std::string("silu"));
      ++with_silu;
    }
    const std::string name = norm->name + "_group_norm";
    Value* scale = gamma ? graph.add_constant(graph.unique_name(name + "_scale"), *gamma)
                         : filled_constant(graph, name + "_scale", channels, 1.0f);
    Value* bias = beta ? graph.add_constant(graph.unique_name(name + "_bias"), *beta)
                       : filled_constant(graph, name + "_bias", channels, 0.0f);
    for (Node* n : pattern) graph.remove_node(n);
    graph.add_node(OpKind::kGroupNorm, name, {x, scale, bias}, {out}, std::move(attrs));
    ++fused;
  }
  return finish_fusion(graph, stats, {{"fuse_group_norm", fused}, {"fuse_group_norm_with_silu", with_silu}});
}

}  // namespace kiln
