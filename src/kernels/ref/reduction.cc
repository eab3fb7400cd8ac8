// ref kernels for the reduction ops (see kernels/kernel.h).
#include "kernels/kernel.h"

namespace kiln {

Status ref_Softmax(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_LayerNormalization(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_InstanceNormalization(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_ReduceMean(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_ReduceSum(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_ReduceMax(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_ArgMax(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_CumSum(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }

}  // namespace kiln
