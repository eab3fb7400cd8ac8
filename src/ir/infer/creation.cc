// Shape inference for the creation ops (see ir/shape_inference.h).
#include "ir/infer/infer_util.h"

namespace kiln {

Status infer_Shape(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_ConstantOfShape(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_Range(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_Trilu(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }

}  // namespace kiln
