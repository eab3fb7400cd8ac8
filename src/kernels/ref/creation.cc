// ref kernels for the creation ops (see kernels/kernel.h).
#include "kernels/kernel.h"

namespace kiln {

Status ref_Shape(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_ConstantOfShape(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_Range(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status ref_Trilu(KernelContext& ctx) { return ctx.unsupported_error("not implemented yet"); }

}  // namespace kiln
