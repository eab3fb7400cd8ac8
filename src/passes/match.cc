#include "passes/match.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <tuple>

namespace kiln {

std::vector<Node*> nodes_of(const Graph& graph, std::initializer_list<OpKind> ops) {
  std::vector<Node*> out;
  for (const auto& n : graph.nodes())
    if (std::find(ops.begin(), ops.end(), n->op) != ops.end()) out.push_back(n.get());
  return out;
}

Node* producer_of(const Value* v, OpKind op) {
  return v && v->producer && v->producer->op == op ? v->producer : nullptr;
}

bool used_once(const Value* v) { return v && v->users.size() == 1 && !v->is_output; }

std::optional<double> scalar_constant(const Value* v) {
  if (!v || !v->constant || v->constant->numel() != 1 || !dtype_is_float(v->constant->dtype()))
    return std::nullopt;
  return v->constant->element_as_double(0);
}

bool is_scalar(const Value* v, double want) {
  const std::optional<double> got = scalar_constant(v);
  return got && std::abs(*got - want) <= 1e-4 * std::abs(want);
}

bool filled_with(const Value* v, double want) {
  if (!v || !v->constant || !dtype_is_float(v->constant->dtype())) return false;
  for (int64_t i = 0; i < v->constant->numel(); ++i)
    if (v->constant->element_as_double(i) != want) return false;
  return true;
}

std::optional<Shape> static_shape(const Value* v) {
  return v && v->shape ? sym_shape_concrete(*v->shape) : std::nullopt;
}

Value* filled_constant(Graph& graph, std::string_view name, int64_t n, float value) {
  Tensor t = Tensor::empty(DType::kF32, {n}).value();
  std::fill_n(t.data<float>(), n, value);
  return graph.add_constant(graph.unique_name(name), std::move(t));
}

Pattern capture() { return {}; }
Pattern constant(double value) { return {Pattern::Kind::kConstant, OpKind::kIdentity, value, {}}; }
Pattern any_constant() { return {Pattern::Kind::kAnyConstant, OpKind::kIdentity, 0, {}}; }
Pattern op(OpKind op, std::vector<Pattern> args) { return {Pattern::Kind::kOp, op, 0, std::move(args)}; }
Pattern either(std::vector<Pattern> alternatives) {
  return {Pattern::Kind::kEither, OpKind::kIdentity, 0, std::move(alternatives)};
}

namespace {

bool match_operands(Node* n, const Pattern& p, bool swapped, Match& m);

bool match_value(Value* v, const Pattern& p, bool root, Match& m) {
  switch (p.kind) {
    case Pattern::Kind::kCapture:
      if (!m.x) m.x = v;
      return m.x == v;
    case Pattern::Kind::kConstant:
      return is_scalar(v, p.value);
    case Pattern::Kind::kAnyConstant:
      if (const std::optional<double> c = scalar_constant(v)) {
        m.constants.push_back(*c);
        return true;
      }
      return false;
    case Pattern::Kind::kEither:
      for (const Pattern& alternative : p.args) {
        Match attempt = m;
        if (match_value(v, alternative, root, attempt)) {
          m = std::move(attempt);
          return true;
        }
      }
      return false;
    case Pattern::Kind::kOp: {
      Node* n = producer_of(v, p.op);
      if (!n || (!root && !used_once(v)) || n->inputs.size() != p.args.size() || n->outputs.size() != 1)
        return false;
      const bool commutative = (p.op == OpKind::kAdd || p.op == OpKind::kMul) && p.args.size() == 2;
      for (bool swapped : {false, true}) {
        if (swapped && !commutative) break;
        Match attempt = m;
        if (match_operands(n, p, swapped, attempt)) {
          attempt.nodes.push_back(n);
          m = std::move(attempt);
          return true;
        }
      }
      return false;
    }
  }
  return false;
}

bool match_operands(Node* n, const Pattern& p, bool swapped, Match& m) {
  for (size_t i = 0; i < p.args.size(); ++i) {
    Value* in = n->inputs[swapped ? 1 - i : i];
    if (!in || !match_value(in, p.args[i], false, m)) return false;
  }
  return true;
}

}  // namespace

bool match(Value* root, const Pattern& pattern, Match& m) {
  // A node already claimed by an earlier fusion is gone: its output has no
  // producer any more, so it cannot match again.
  return match_value(root, pattern, true, m) && m.x;
}

namespace {

// The activation kiln.Linear / kiln.Conv can apply for node n, if any.
std::optional<std::pair<std::string, float>> activation_of(const Node& n) {
  if (n.op == OpKind::kRelu) return std::pair{std::string("relu"), 0.0f};
  if (n.op == OpKind::kSilu) return std::pair{std::string("swish"), n.attrs.get_float("alpha", 1.0f)};
  if (n.op != OpKind::kGelu) return std::nullopt;
  const std::string form = n.attrs.get_string("approximate", "none");
  if (form == "sigmoid") return std::pair{std::string("swish"), 1.702f};  // x sigmoid(1.702 x)
  return std::pair{std::string(form == "tanh" ? "gelu_tanh" : "gelu"), 0.0f};
}

// Whether `gate` (static shape) scales `out`'s rows in the runs kiln.Linear
// takes: [N], or [B or 1, 1, ..., 1, N] against [B, ..., N].
bool is_gate(const Value* gate, const Value* out) {
  const std::optional<Shape> g = static_shape(gate), y = static_shape(out);
  if (!g || !y || gate->dtype != DType::kF32 || g->empty() || y->empty() || g->back() != y->back()) return false;
  if (g->size() == 1) return true;
  if (g->size() != y->size() || ((*g)[0] != 1 && (*g)[0] != (*y)[0])) return false;
  for (size_t d = 1; d + 1 < g->size(); ++d)
    if ((*g)[d] != 1) return false;
  return true;
}

}  // namespace

Epilogue match_epilogue(Value* from, const Node* first, const std::map<const Node*, size_t>& position, bool gates) {
  Epilogue e;
  e.out = from;
  if (used_once(e.out))
    if (auto act = activation_of(*e.out->users[0])) {
      std::tie(e.activation, e.alpha) = *act;
      e.nodes.push_back(e.out->users[0]);
      e.out = e.out->users[0]->outputs[0];
    }
  const auto at = [&](const Node* n) { auto it = position.find(n); return it == position.end() ? SIZE_MAX : it->second; };
  // The other operand of e.out's only user, if that is a binary `op` of e.out
  // and a value computed before `first`.
  const auto operand_of_next = [&](OpKind op) -> Value* {
    if (!used_once(e.out) || e.out->users[0]->op != op) return nullptr;
    const Node* n = e.out->users[0];
    Value* other = n->inputs[0] == e.out ? n->inputs[1] : n->inputs[0];
    const bool earlier = !other->producer || at(other->producer) < at(first);
    return other != e.out && other->dtype == e.out->dtype && static_shape(n->outputs[0]) == static_shape(e.out) &&
                   earlier
               ? other
               : nullptr;
  };
  if (Value* gate = gates ? operand_of_next(OpKind::kMul) : nullptr; gate && is_gate(gate, e.out)) {
    e.gate = gate;
    e.nodes.push_back(e.out->users[0]);
    e.out = e.out->users[0]->outputs[0];
  }
  Value* residual = operand_of_next(OpKind::kAdd);
  if (residual && static_shape(residual) && static_shape(residual) == static_shape(e.out)) {
    e.residual = residual;
    e.nodes.push_back(e.out->users[0]);
    e.out = e.out->users[0]->outputs[0];
  }
  return e;
}

void set_epilogue(const Epilogue& e, Attributes& attrs, std::vector<Value*>& inputs) {
  attrs.set("activation", e.activation);
  if (e.activation == "swish") attrs.set("alpha", e.alpha);
  if (e.residual || e.gate) inputs.push_back(e.residual);  // input 3, absent (null) for a gate alone
  if (e.gate) inputs.push_back(e.gate);
}

Status finish_fusion(Graph& graph, PassStats* stats, std::initializer_list<std::pair<const char*, int64_t>> counts) {
  graph.compact();
  KILN_RETURN_IF_ERROR(graph.topo_sort());
  if (stats)
    for (const auto& [name, n] : counts) stats->add(name, n);
  return ok_status();
}

void replace_match(Graph& graph, const Match& m, Value* root, OpKind op, const std::string& name,
                   Attributes attrs, std::vector<Value*> extra) {
  for (Node* n : m.nodes) graph.remove_node(n);
  std::vector<Value*> inputs = {m.x};
  inputs.insert(inputs.end(), extra.begin(), extra.end());
  graph.add_node(op, name, std::move(inputs), {root}, std::move(attrs));
}

}  // namespace kiln
