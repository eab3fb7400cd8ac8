// Marks the convolutions Winograd's F(m x m, 3x3) can compute: a 2-D Conv (or
// kiln.Conv) by a constant-shaped 3x3 kernel, stride 1, no dilation, one
// group gets the attribute winograd = 1. The CPU kernel then runs it by
// Winograd (kernels/cpu/winograd.h) where that pays (enough channels and
// output tiles, no activation to apply), with the tile winograd::best_tile
// picks (a value of 2 or 4, kept, names it instead: benchmarks); elsewhere,
// and for every convolution when this pass is switched off (a fusion switch
// file {"winograd_conv": false}), convolutions stay direct.
//
// A pass, not a kernel's own choice, so the choice shows in the graph and
// can be switched off like any rewrite: Winograd's results differ from the
// direct product's in the last bits (a relative 6e-6 on SD's VAE decoder).
#include "passes/match.h"
#include "passes/pass.h"

namespace kiln {

namespace {

// Whether attribute `name` is absent or all ones.
bool ones(const Node& node, const char* name) {
  const std::vector<int64_t>* values = node.attrs.get_ints(name);
  if (!values) return true;
  for (int64_t v : *values)
    if (v != 1) return false;
  return true;
}

}  // namespace

Status winograd_conv(Graph& graph, PassStats* stats) {
  int64_t marked = 0;
  for (Node* conv : nodes_of(graph, {OpKind::kConv, OpKind::kFusedConv})) {
    const std::optional<Shape> w = static_shape(conv->inputs[1]);
    if (!w || w->size() != 4 || (*w)[2] != 3 || (*w)[3] != 3) continue;
    if (conv->attrs.get_int("group", 1) != 1 || !ones(*conv, "strides") || !ones(*conv, "dilations")) continue;
    const int64_t named = conv->attrs.get_int("winograd", 0);
    if (named != 2 && named != 4) conv->attrs.set("winograd", int64_t(1));
    ++marked;
  }
  if (stats && marked) stats->add("winograd_conv", marked);
  return ok_status();
}

}  // namespace kiln
