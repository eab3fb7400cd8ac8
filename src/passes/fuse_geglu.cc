// GEGLU fusion (the feed-forward of SD's transformer blocks):
//
//   h = proj(x) [..., 2F];  a = Slice(h, 0:F);  g = Slice(h, F:2F)
//   y = Mul(a, kiln.Gelu(g))
//
// becomes one kiln.Geglu(h): the two halves and the GELU are never written.
// Runs after fuse_gelu, whose kiln.Gelu it matches.
#include "passes/match.h"
#include "passes/pass.h"

namespace kiln {

namespace {

// The first element a Slice of `h` along its last axis (step 1) starts at,
// when that is what the node is.
std::optional<int64_t> last_axis_slice_start(const Node* slice, const Value* h) {
  if (!slice || slice->op != OpKind::kSlice || slice->inputs[0] != h || !h->shape) return std::nullopt;
  auto scalar_int = [](const Value* v) -> std::optional<int64_t> {
    if (!v || !v->constant || v->constant->numel() != 1 || dtype_is_float(v->constant->dtype())) return std::nullopt;
    return v->constant->element_as_int(0);
  };
  const int64_t rank = int64_t(h->shape->size());
  const std::optional<int64_t> axis = slice->input(3) ? scalar_int(slice->input(3)) : std::optional<int64_t>(0);
  const std::optional<int64_t> step = slice->input(4) ? scalar_int(slice->input(4)) : std::optional<int64_t>(1);
  if (!axis || (*axis != -1 && *axis != rank - 1) || step != 1) return std::nullopt;
  return scalar_int(slice->input(1));
}

}  // namespace

Status fuse_geglu(Graph& graph, PassStats* stats) {
  int64_t fused = 0;
  for (Node* gelu : nodes_of(graph, {OpKind::kGelu})) {
    const std::string form = gelu->attrs.get_string("approximate", "none");
    Value* gate = gelu->inputs[0];
    Node* gate_slice = gate->producer;
    if (form == "sigmoid" || !used_once(gate) || !used_once(gelu->outputs[0])) continue;
    Node* mul = gelu->outputs[0]->users[0];
    if (mul->op != OpKind::kMul || !gate_slice || gate_slice->op != OpKind::kSlice) continue;
    Value* h = gate_slice->inputs[0];
    Value* value = mul->inputs[0] == gelu->outputs[0] ? mul->inputs[1] : mul->inputs[0];
    const std::optional<Shape> hs = static_shape(h), ys = static_shape(mul->outputs[0]);
    if (!hs || hs->empty() || hs->back() % 2 != 0 || !used_once(value) || h->dtype != DType::kF32) continue;
    const int64_t half = hs->back() / 2;
    Shape want = *hs;
    want.back() = half;
    if (ys != want || static_shape(gate) != want || static_shape(value) != want) continue;
    if (last_axis_slice_start(value->producer, h) != 0 || last_axis_slice_start(gate_slice, h) != half) continue;
    Attributes attrs;
    attrs.set("approximate", form);
    Value* out = mul->outputs[0];
    const std::string name = gelu->name + "_geglu";
    for (Node* n : {value->producer, gate_slice, gelu, mul}) graph.remove_node(n);
    graph.add_node(OpKind::kGeglu, name, {h}, {out}, std::move(attrs));
    ++fused;
  }
  return finish_fusion(graph, stats, {{"fuse_geglu", fused}});
}

}  // namespace kiln
