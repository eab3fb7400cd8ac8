// ref kernels for the linalg ops (see kernels/kernel.h).
#include "kernels/kernel.h"

namespace kiln {

Status ref_MatMul(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_Gemm(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_Conv(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_ConvTranspose(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_Einsum(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }

}  // namespace kiln
