// Shape inference for the movement ops (see ir/shape_inference.h).
#include "ir/infer/infer_util.h"

namespace kiln {

Status infer_Reshape(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_Flatten(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_Squeeze(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_Unsqueeze(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_Transpose(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_Concat(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_Split(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_Slice(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_Gather(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_GatherElements(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_Expand(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }
Status infer_Tile(InferContext& ctx) { return ctx.unsupported_error("not implemented yet"); }

}  // namespace kiln
