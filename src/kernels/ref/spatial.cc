// ref kernels for the spatial ops (see kernels/kernel.h).
#include "kernels/kernel.h"

namespace kiln {

Status ref_Pad(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_Resize(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }

}  // namespace kiln
