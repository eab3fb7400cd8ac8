// Conv fusion: a Conv followed by an activation and/or a residual Add
// (match.h's Epilogue; the ResNet blocks of SD's UNet and VAE end in
// conv2 + skip) becomes one kiln.Conv: oneDNN applies them as post-ops while
// the output tile is in registers, so the conv output is written once.
#include "passes/match.h"
#include "passes/pass.h"

namespace kiln {

Status fuse_conv(Graph& graph, PassStats* stats) {
  std::map<const Node*, size_t> order;
  for (const auto& n : graph.nodes()) order[n.get()] = order.size();
  int64_t fused = 0;
  for (Node* conv : nodes_of(graph, {OpKind::kConv})) {
    Value* out = conv->outputs[0];
    if (out->dtype != DType::kF32 || !static_shape(out)) continue;
    const Epilogue e = match_epilogue(out, conv, order);
    if (e.nodes.empty()) continue;
    std::vector<Value*> inputs = {conv->inputs[0], conv->inputs[1], conv->input(2)};
    Attributes attrs = conv->attrs;
    set_epilogue(e, attrs, inputs);
    const std::string name = conv->name + "_fused";
    const size_t position = order[e.nodes.back()];
    graph.remove_node(conv);
    for (Node* n : e.nodes) graph.remove_node(n);
    order[graph.add_node(OpKind::kFusedConv, name, std::move(inputs), {e.out}, std::move(attrs))] = position;
    ++fused;
  }
  return finish_fusion(graph, stats, {{"fuse_conv", fused}});
}

}  // namespace kiln
