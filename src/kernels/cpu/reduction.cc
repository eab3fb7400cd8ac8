// cpu kernels for the reduction ops (see kernels/kernel.h).
#include "kernels/kernel.h"

namespace kiln {

Status cpu_Softmax(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_LayerNormalization(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_InstanceNormalization(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_ReduceMean(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_ReduceSum(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_ReduceMax(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_ArgMax(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_CumSum(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }

}  // namespace kiln
