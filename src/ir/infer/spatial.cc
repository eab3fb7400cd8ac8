// Shape inference for the spatial ops (see ir/shape_inference.h).
#include "ir/infer/infer_util.h"

namespace kiln {

Status infer_Pad(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_Resize(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }

}  // namespace kiln
