// Shape inference for the linalg ops (see ir/shape_inference.h).
#include "ir/infer/infer_util.h"

namespace kiln {

Status infer_MatMul(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_Gemm(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_Conv(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_ConvTranspose(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_Einsum(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }

}  // namespace kiln
