// Shape inference for the reduction ops (see ir/shape_inference.h).
#include "ir/infer/infer_util.h"

namespace kiln {

Status infer_Softmax(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_LayerNormalization(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_InstanceNormalization(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_ReduceMean(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_ReduceSum(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_ReduceMax(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_ArgMax(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_CumSum(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }

}  // namespace kiln
