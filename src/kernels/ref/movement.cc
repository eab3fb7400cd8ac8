// ref kernels for the movement ops (see kernels/kernel.h).
#include "kernels/kernel.h"

namespace kiln {

Status ref_Reshape(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_Flatten(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_Squeeze(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_Unsqueeze(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_Transpose(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_Concat(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_Split(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_Slice(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_Gather(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_GatherElements(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_Expand(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_Tile(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }

}  // namespace kiln
