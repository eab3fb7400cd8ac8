// Constant folding. A node is folded when shape inference already knows its
// outputs' values (Shape of a fully known shape), or when every input it has
// is a constant: it is then run once with the CPU kernels and its outputs
// become constants. One walk in topological order folds whole chains, such as
// the Shape -> Gather -> Unsqueeze -> Concat -> Reshape target arithmetic that
// torch exports emit.
#include <cstdlib>

#include "ir/shape_inference.h"
#include "kernels/cpu/cpu_context.h"
#include "kernels/kernel.h"
#include "passes/pass.h"

namespace kiln {

namespace {

// Folding does not create constants bigger than this: a huge constant (say,
// ConstantOfShape of an activation size) costs memory and load time for
// nothing the run could not compute.
constexpr size_t kMaxFoldedBytes = size_t(64) << 20;

class HeapWorkspace final : public Workspace {
 public:
  ~HeapWorkspace() override {
    for (void* p : blocks_) std::free(p);
  }
  void* scratch(size_t bytes) override {
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
    if (p) blocks_.push_back(p);
    return p;
  }

 private:
  std::vector<void*> blocks_;
};

// The node's outputs when they can be known now; nullopt when not foldable.
// Re-infers the node's output shapes on the way: inputs folded earlier in
// this walk (a Reshape's target, say) can make them concrete, which lets the
// Shape nodes downstream fold in turn.
Result<std::optional<std::vector<Tensor>>> try_evaluate(Node& node, CpuContext& cpu) {
  InferContext infer(node);
  infer.inputs.resize(node.inputs.size());
  bool all_constant = true;
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    const Value* in = node.inputs[i];
    if (!in) continue;
    infer.inputs[i] = TypeInfo{true, in->dtype, in->shape, in->constant};
    all_constant &= in->constant.has_value();
  }
  infer.outputs.resize(node.outputs.size());
  KILN_RETURN_IF_ERROR(infer_node(infer));
  for (size_t i = 0; i < node.outputs.size(); ++i)
    if (node.outputs[i] && infer.outputs[i].shape) node.outputs[i]->shape = infer.outputs[i].shape;

  std::vector<Tensor> outputs;
  bool values_known = true;
  for (const TypeInfo& out : infer.outputs) {
    values_known &= out.value.has_value();
    if (out.value) outputs.push_back(*out.value);
  }
  if (values_known) return std::optional(std::move(outputs));
  if (!all_constant) return std::optional<std::vector<Tensor>>();

  outputs.clear();
  KernelContext kc;
  kc.node = &node;
  kc.cpu = &cpu;
  HeapWorkspace workspace;
  kc.workspace = &workspace;
  for (const Value* in : node.inputs) kc.inputs.push_back(in ? &in->constant->view() : nullptr);
  outputs.reserve(node.outputs.size());
  for (size_t i = 0; i < node.outputs.size(); ++i) {
    auto shape = infer.outputs[i].shape ? sym_shape_concrete(*infer.outputs[i].shape) : std::nullopt;
    if (!shape) return std::optional<std::vector<Tensor>>();
    auto numel = shape_numel_checked(*shape);
    if (!numel.ok() || size_t(*numel) * dtype_size(infer.outputs[i].dtype) > kMaxFoldedBytes)
      return std::optional<std::vector<Tensor>>();
    KILN_ASSIGN_OR_RETURN(Tensor t, Tensor::empty(infer.outputs[i].dtype, *shape));
    outputs.push_back(std::move(t));
  }
  for (Tensor& t : outputs) kc.outputs.push_back(&t.mutable_view());
  KILN_RETURN_IF_ERROR(cpu_kernel(node.op)(kc));
  return std::optional(std::move(outputs));
}

}  // namespace

Status fold_constants(Graph& graph, PassStats* stats) {
  CpuContext cpu;
  std::vector<Node*> nodes;
  for (const auto& n : graph.nodes()) nodes.push_back(n.get());
  int64_t folded = 0;
  for (Node* node : nodes) {
    auto result = try_evaluate(*node, cpu);
    if (!result.ok()) {
      // An Unsupported op simply stays in the graph; anything else is a real
      // error in the model that running it would hit too.
      if (result.status().code() == StatusCode::kUnsupported) continue;
      return result.status();
    }
    if (!result->has_value()) continue;
    std::vector<Tensor>& values = **result;
    for (size_t i = 0; i < node->outputs.size(); ++i) {
      Value* out = node->outputs[i];
      if (!out) continue;
      out->constant = std::move(values[i]);
      out->dtype = out->constant->dtype();
      out->shape = sym_shape_from(out->constant->shape());
    }
    graph.remove_node(node);
    ++folded;
  }
  graph.compact();
  if (stats) stats->add("fold_constants", folded);
  return ok_status();
}

}  // namespace kiln
