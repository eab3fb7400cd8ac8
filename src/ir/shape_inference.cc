#include "ir/shape_inference.h"

namespace kiln {

namespace {
constexpr InferFn kInferFns[] = {
#define KILN_OP(e, name, group) &infer_##e,
#include "ir/op_table.def"
#undef KILN_OP
};
static_assert(std::size(kInferFns) == kOpCount);
}  // namespace

InferFn op_infer_fn(OpKind op) { return kInferFns[static_cast<int>(op)]; }

Status infer_node(InferContext& ctx) {
  KILN_RETURN_IF_ERROR(op_infer_fn(ctx.node().op)(ctx));
  for (size_t i = 0; i < ctx.num_outputs(); ++i) {
    const TypeInfo& out = ctx.outputs[i];
    if (ctx.node().outputs.size() > i && ctx.node().outputs[i] && !out.present)
      return internal_error("{}: inference left output {} unset", node_label(ctx.node()), i);
  }
  return ok_status();
}

}  // namespace kiln
