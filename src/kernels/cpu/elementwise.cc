// cpu kernels for the elementwise ops (see kernels/kernel.h).
#include "kernels/kernel.h"

namespace kiln {

Status cpu_Add(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_Sub(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_Mul(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_Div(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_Pow(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_Min(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_Max(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_Sqrt(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_Reciprocal(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_Neg(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_Abs(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_Exp(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_Log(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_Erf(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_Tanh(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_Sigmoid(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_Relu(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_LeakyRelu(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_Cos(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_Sin(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_Clip(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_Where(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_Equal(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_Less(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_Greater(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_Not(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_Cast(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_Identity(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_Dropout(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }

}  // namespace kiln
