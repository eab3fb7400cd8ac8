// Conv fusion: a Conv followed by an activation becomes one kiln.Conv; the
// GEMM applies it to each block of output while it is in cache.
//
// A residual Add (the conv2 + skip that ends SD's ResNet blocks) is left
// alone although kiln.Conv can take one: when convolutions ran on oneDNN 2.6,
// its binary post-op on the plain (NCHW) layouts made the gemm convolution
// slower, not faster (measurements: docs/performance.md#conv-residual-fusion).
// kiln's own GEMM adds a residual cheaply; fusing it again is to be measured.
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
    Epilogue e = match_epilogue(out, conv, order);
    if (e.activation == "none") continue;
    if (e.residual) {  // keep the activation only (see above)
      e.residual = nullptr;
      e.nodes.resize(1);
      e.out = e.nodes[0]->outputs[0];
    }
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
