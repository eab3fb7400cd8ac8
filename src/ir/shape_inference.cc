#include "ir/shape_inference.h"

namespace kiln {

namespace {
constexpr InferFn kInferFns[] = {
#define KILN_OP(e, name, group, ...) &infer_##e,
#include "ir/op_table.def"
#undef KILN_OP
};
static_assert(std::size(kInferFns) == kOpCount);
}  // namespace

InferFn op_infer_fn(OpKind op) { return kInferFns[static_cast<int>(op)]; }

namespace {
// Input/output counts from the op table, so no infer function can index past
// what the node has.
Status check_arity(const InferContext& ctx) {
  const Node& n = ctx.node();
  const OpArity a = op_arity(n.op);
  auto range = [](int lo, int hi) {
    return hi == kMany ? fmt::format("at least {}", lo)
                       : lo == hi ? fmt::format("{}", lo) : fmt::format("{} to {}", lo, hi);
  };
  if (int(n.inputs.size()) < a.min_inputs || int(n.inputs.size()) > a.max_inputs)
    return ctx.error("has {} inputs, expected {}", n.inputs.size(), range(a.min_inputs, a.max_inputs));
  if (int(n.outputs.size()) < a.min_outputs || int(n.outputs.size()) > a.max_outputs)
    return ctx.error("has {} outputs, expected {}", n.outputs.size(), range(a.min_outputs, a.max_outputs));
  for (int i = 0; i < a.min_inputs; ++i)
    if (!ctx.has_input(size_t(i))) return ctx.error("required input {} is missing", i);
  if (!n.outputs[0]) return ctx.error("output 0 is omitted");
  return ok_status();
}
}  // namespace

Status infer_node(InferContext& ctx) {
  KILN_RETURN_IF_ERROR(check_arity(ctx));
  KILN_RETURN_IF_ERROR(op_infer_fn(ctx.node().op)(ctx));
  for (size_t i = 0; i < ctx.num_outputs(); ++i) {
    const TypeInfo& out = ctx.outputs[i];
    if (ctx.node().outputs.size() > i && ctx.node().outputs[i] && !out.present)
      return internal_error("{}: inference left output {} unset", node_label(ctx.node()), i);
  }
  return ok_status();
}

}  // namespace kiln
