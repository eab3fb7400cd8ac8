// cpu kernels for the creation ops (see kernels/kernel.h).
#include "kernels/kernel.h"

namespace kiln {

Status cpu_Shape(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_ConstantOfShape(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_Range(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status cpu_Trilu(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }

}  // namespace kiln
