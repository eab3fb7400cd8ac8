// Attention fusion. Exported attention is
//
//   s = MatMul(Qh, Kt)  [ -> Mul(s, c) | Div(s, c) ]  [ -> Add(s, mask) ]
//   p = Softmax(s, axis=-1);  o = MatMul(p, Vh)
//
// with Qh, Kt, Vh usually Transposes of [B, S, H, D] head splits and o
// Transposed back. It becomes one kiln.Attention reading the untransposed
// tensors (the Transposes become its perms), so neither the score matrix nor
// the transposed copies are ever written.
#include "ir/attention_attrs.h"
#include "passes/match.h"
#include "passes/pass.h"

namespace kiln {

namespace {

size_t rank_of(const Value* v) { return v && v->shape ? v->shape->size() : 0; }

std::vector<int64_t> identity(size_t rank) {
  std::vector<int64_t> perm(rank);
  for (size_t i = 0; i < rank; ++i) perm[i] = int64_t(i);
  return perm;
}

// The tensor under an operand's Transpose (when only the attention reads
// it) and the perm that makes the operand from it.
std::pair<Value*, std::vector<int64_t>> untransposed(Value* v, std::vector<Node*>& pattern) {
  Node* t = producer_of(v, OpKind::kTranspose);
  const std::vector<int64_t>* perm = t ? t->attrs.get_ints("perm") : nullptr;
  if (!t || !perm || !used_once(v) || perm->size() != rank_of(v)) return {v, identity(rank_of(v))};
  pattern.push_back(t);
  return {t->inputs[0], *perm};
}

// A Mul by a scalar constant, or a Div by a nonzero one, producing v.
Node* scalar_scaling(const Value* v) {
  if (Node* mul = producer_of(v, OpKind::kMul))
    if (scalar_constant(mul->inputs[0]) || scalar_constant(mul->inputs[1])) return mul;
  if (Node* div = producer_of(v, OpKind::kDiv))
    if (scalar_constant(div->inputs[1]).value_or(0) != 0) return div;
  return nullptr;
}

// v is Q Kᵀ, possibly scaled: the side of the mask Add that is not the mask.
bool leads_to_scores(const Value* v) {
  while (Node* n = scalar_scaling(v)) v = n->inputs[scalar_constant(n->inputs[1]) ? 0 : 1];
  return producer_of(v, OpKind::kMatMul) != nullptr;
}

// Q, Kᵀ and V have static shapes with the same batch dims (attention does
// not broadcast them, MatMul would).
bool same_batch_dims(const Value* q, const Value* kt, const Value* v) {
  const auto qs = static_shape(q), ks = static_shape(kt), vs = static_shape(v);
  if (!qs || !ks || !vs) return false;
  for (size_t d = 0; d + 2 < qs->size(); ++d)
    if ((*qs)[d] != (*ks)[d] || (*qs)[d] != (*vs)[d]) return false;
  return true;
}

}  // namespace

Status fuse_attention(Graph& graph, PassStats* stats) {
  const std::vector<Node*> softmaxes = nodes_of(graph, {OpKind::kSoftmax});
  int64_t fused = 0;
  for (Node* softmax : softmaxes) {
    Value* probs = softmax->outputs[0];
    const size_t rank = rank_of(probs);
    const int64_t axis = softmax->attrs.get_int("axis", -1);
    if ((rank != 3 && rank != 4) || (axis != -1 && axis != int64_t(rank) - 1) || !used_once(probs)) continue;
    Node* pv = probs->users[0];
    if (pv->op != OpKind::kMatMul || pv->inputs[0] != probs) continue;

    // Back from the softmax: optional mask, optional scale, then Q Kᵀ.
    std::vector<Node*> pattern = {softmax, pv};
    Value* s = softmax->inputs[0];
    Value* mask = nullptr;
    float scale = 1.0f;
    if (Node* add = producer_of(s, OpKind::kAdd); add && used_once(s)) {
      const size_t i = leads_to_scores(add->inputs[0]) ? 0 : 1;
      mask = add->inputs[1 - i];
      s = add->inputs[i];
      pattern.push_back(add);
    }
    for (Node* n = scalar_scaling(s); n && used_once(s); n = scalar_scaling(s)) {
      const size_t c = scalar_constant(n->inputs[1]) ? 1 : 0;
      const double value = *scalar_constant(n->inputs[c]);
      scale *= float(n->op == OpKind::kMul ? value : 1 / value);
      s = n->inputs[1 - c];
      pattern.push_back(n);
    }
    Node* qk = producer_of(s, OpKind::kMatMul);
    if (!qk || !used_once(s)) continue;
    pattern.push_back(qk);
    if (mask && (mask->dtype != DType::kF32 || rank_of(mask) > rank)) continue;
    bool same_rank = true;
    for (Value* v : {qk->inputs[0], qk->inputs[1], pv->inputs[1]})
      same_rank &= rank_of(v) == rank && v->dtype == DType::kF32;
    if (!same_rank || !same_batch_dims(qk->inputs[0], qk->inputs[1], pv->inputs[1])) continue;

    auto [q, q_perm] = untransposed(qk->inputs[0], pattern);
    auto [k, k_perm] = untransposed(qk->inputs[1], pattern);
    auto [v, v_perm] = untransposed(pv->inputs[1], pattern);
    Value* out = pv->outputs[0];
    std::vector<int64_t> out_perm = identity(rank);
    if (Node* t = used_once(out) ? out->users[0] : nullptr;
        t && t->op == OpKind::kTranspose && t->attrs.get_ints("perm") && t->attrs.get_ints("perm")->size() == rank) {
      out_perm = *t->attrs.get_ints("perm");
      pattern.push_back(t);
      out = t->outputs[0];
    }
    Attributes attrs;
    attrs.set(attention_attrs::kScale, scale);
    attrs.set(attention_attrs::kOperands[0].perm, q_perm);
    attrs.set(attention_attrs::kOperands[1].perm, k_perm);
    attrs.set(attention_attrs::kOperands[2].perm, v_perm);
    attrs.set(attention_attrs::kOutPerm, out_perm);
    std::vector<Value*> inputs = {q, k, v};
    if (mask) inputs.push_back(mask);
    const std::string name = softmax->name + "_attention";
    for (Node* n : pattern) graph.remove_node(n);
    graph.add_node(OpKind::kAttention, name, std::move(inputs), {out}, std::move(attrs));
    ++fused;
  }
  return finish_fusion(graph, stats, {{"fuse_attention", fused}});
}

}  // namespace kiln
