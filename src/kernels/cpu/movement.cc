// cpu kernels for the movement ops (see kernels/kernel.h).
#include "kernels/kernel.h"

namespace kiln {

Status cpu_Reshape(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_Flatten(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_Squeeze(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_Unsqueeze(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_Transpose(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_Concat(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_Split(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_Slice(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_Gather(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_GatherElements(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_Expand(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_Tile(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }

}  // namespace kiln
