// Shape inference for kiln.DenoiseStep and kiln.UniPcStep (op_table.def, group "denoise").
#include "ir/infer/infer_util.h"
#include "kernels/denoise_update.h"

namespace kiln {

Status infer_DenoiseStep(InferContext& ctx) {
  for (size_t i : {0, 1, 2}) KILN_RETURN_IF_ERROR(require_dtype(ctx, i, {DType::kF32}));
  KILN_RETURN_IF_ERROR(require_dtype(ctx, 3, {DType::kI64}));
  KILN_RETURN_IF_ERROR(require_dtype(ctx, 4, {DType::kF32}));
  KILN_RETURN_IF_ERROR(require_dtype(ctx, 5, {DType::kI64}));
  const auto& x = ctx.input(0).shape;
  for (size_t i : {1, 2}) {
    const auto& other = ctx.input(i).shape;
    if (x && other && *x != *other)
      return ctx.error("input {} has shape {}, which differs from X's {}", i, sym_shape_to_string(*other),
                       sym_shape_to_string(*x));
  }
  for (size_t i : {3, 5}) {
    const auto& scalar = ctx.input(i).shape;
    if (scalar && !scalar->empty()) return ctx.error("input {} (the {}) must be a scalar", i, i == 3 ? "step counter" : "seed");
  }
  const auto& table = ctx.input(4).shape;
  if (table && (table->size() != 2 || ((*table)[0].known() && (*table)[0].value != kDenoiseCoefficientRows)))
    return ctx.error("the coefficient table must be [{}, steps], got {}", kDenoiseCoefficientRows,
                     sym_shape_to_string(*table));
  if (ctx.attrs().get_int("noise_first_pair", 0) < 0) return ctx.error("noise_first_pair must be >= 0");
  set_output(ctx, 0, DType::kF32, x);
  set_output(ctx, 1, DType::kF32, x);
  set_output(ctx, 2, DType::kI64, SymShape{});
  return ok_status();
}

Status infer_UniPcStep(InferContext& ctx) {
  for (size_t i : {0, 1, 2, 3, 4}) KILN_RETURN_IF_ERROR(require_dtype(ctx, i, {DType::kF32}));
  KILN_RETURN_IF_ERROR(require_dtype(ctx, 5, {DType::kI64}));
  KILN_RETURN_IF_ERROR(require_dtype(ctx, 6, {DType::kF32}));
  const auto& x = ctx.input(0).shape;
  for (size_t i : {1, 2, 3, 4}) {
    const auto& other = ctx.input(i).shape;
    if (x && other && *x != *other)
      return ctx.error("input {} has shape {}, which differs from X's {}", i, sym_shape_to_string(*other),
                       sym_shape_to_string(*x));
  }
  const auto& counter = ctx.input(5).shape;
  if (counter && !counter->empty()) return ctx.error("input 5 (the step counter) must be a scalar");
  const auto& table = ctx.input(6).shape;
  if (table && (table->size() != 2 || ((*table)[0].known() && (*table)[0].value != kUniPcCoefficientRows)))
    return ctx.error("the coefficient table must be [{}, steps], got {}", kUniPcCoefficientRows,
                     sym_shape_to_string(*table));
  for (size_t i = 0; i < 4; ++i) set_output(ctx, i, DType::kF32, x);
  set_output(ctx, 4, DType::kI64, SymShape{});
  return ok_status();
}

}  // namespace kiln
