// ref kernels for the elementwise ops (see kernels/kernel.h).
#include "kernels/kernel.h"

namespace kiln {

Status ref_Add(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_Sub(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_Mul(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_Div(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_Pow(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_Min(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_Max(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_Sqrt(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_Reciprocal(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_Neg(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_Abs(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_Exp(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_Log(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_Erf(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_Tanh(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_Sigmoid(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_Relu(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_LeakyRelu(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_Cos(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_Sin(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_Clip(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_Where(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_Equal(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_Less(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_Greater(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_Not(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_Cast(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_Identity(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_Dropout(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }

}  // namespace kiln
