// Per-op shape and dtype inference.
//
// One function per op, infer_<Op>(InferContext&), generated from op_table.def
// and implemented in src/ir/infer/<group>.cc. It reads the inputs' dtypes,
// shapes (possibly symbolic) and, when known, values, and fills the outputs'
// dtype and shape. It validates the node: wrong input counts, ranks, dtypes,
// attribute values are errors naming the node.
//
// The same functions serve import-time inference (symbolic shapes, values
// known only for constants) and the eager executor (every shape concrete,
// every input value known).
#pragma once

#include <optional>
#include <vector>

#include "ir/graph.h"

namespace kiln {

struct TypeInfo {
  bool present = false;           // false for an omitted optional input
  DType dtype = DType::kF32;
  std::optional<SymShape> shape;  // nullopt: rank unknown
  std::optional<Tensor> value;    // set when the tensor's contents are known
};

class InferContext {
 public:
  explicit InferContext(const Node& node) : node_(node) {}

  const Node& node() const { return node_; }
  const Attributes& attrs() const { return node_.attrs; }
  size_t num_inputs() const { return inputs.size(); }
  size_t num_outputs() const { return outputs.size(); }
  bool has_input(size_t i) const { return i < inputs.size() && inputs[i].present; }
  const TypeInfo& input(size_t i) const { return inputs[i]; }
  TypeInfo& output(size_t i) { return outputs[i]; }

  // An InvalidArgument / Unsupported status prefixed with the node's label.
  template <typename... Args>
  Status error(fmt::format_string<Args...> f, Args&&... args) const {
    return invalid_argument("{}: {}", node_label(node_), fmt::format(f, std::forward<Args>(args)...));
  }
  template <typename... Args>
  Status unsupported_error(fmt::format_string<Args...> f, Args&&... args) const {
    return unsupported("{}: {}", node_label(node_), fmt::format(f, std::forward<Args>(args)...));
  }

  std::vector<TypeInfo> inputs;
  std::vector<TypeInfo> outputs;

 private:
  const Node& node_;
};

using InferFn = Status (*)(InferContext&);

#define KILN_OP(e, name, group, ...) Status infer_##e(InferContext& ctx);
#include "ir/op_table.def"
#undef KILN_OP

InferFn op_infer_fn(OpKind op);

// Runs the node's inference, then checks it set every output the node has.
Status infer_node(InferContext& ctx);

}  // namespace kiln
