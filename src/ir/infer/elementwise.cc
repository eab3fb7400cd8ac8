// Shape inference for the elementwise ops (see ir/shape_inference.h).
#include "ir/infer/infer_util.h"

namespace kiln {

Status infer_Add(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_Sub(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_Mul(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_Div(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_Pow(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_Min(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_Max(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_Sqrt(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_Reciprocal(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_Neg(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_Abs(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_Exp(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_Log(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_Erf(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_Tanh(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_Sigmoid(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_Relu(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_LeakyRelu(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_Cos(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_Sin(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_Clip(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_Where(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_Equal(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_Less(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_Greater(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_Not(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_Cast(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_Identity(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_Dropout(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }

}  // namespace kiln
