// cpu kernels for the linalg ops (see kernels/kernel.h).
#include "kernels/kernel.h"

namespace kiln {

Status cpu_MatMul(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_Gemm(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_Conv(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_ConvTranspose(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_Einsum(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }

}  // namespace kiln
