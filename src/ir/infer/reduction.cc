// Shape inference for the reduction ops (see ir/shape_inference.h).
#include <algorithm>

#include "ir/infer/infer_util.h"

namespace kiln {

namespace {

constexpr std::initializer_list<DType> kFloatTypes = {DType::kF32};
constexpr std::initializer_list<DType> kSumTypes = {DType::kF32, DType::kF64, DType::kI32,
                                                    DType::kI64};
constexpr std::initializer_list<DType> kMaxTypes = {DType::kF32, DType::kF64, DType::kI32,
                                                    DType::kI64, DType::kI8, DType::kU8};

// Output of an op that keeps its input's shape and dtype.
Status same_as_input(InferContext& ctx) {
  set_output(ctx, 0, ctx.input(0).dtype, ctx.input(0).shape);
  return ok_status();
}

// The axes of a Reduce* node: the `axes` attribute (ReduceSum before opset
// 13, ReduceMean/ReduceMax before 18) or else input 1. nullopt while input 1's
// value is unknown (import time).
Result<std::optional<std::vector<int64_t>>> raw_reduce_axes(const InferContext& ctx) {
  if (const auto* attr = ctx.attrs().get_ints("axes")) {
    if (ctx.has_input(1)) return ctx.error("axes is given both as attribute and as input");
    return std::optional<std::vector<int64_t>>(*attr);
  }
  if (!ctx.has_input(1)) return std::optional<std::vector<int64_t>>(std::vector<int64_t>{});
  if (ctx.input(1).dtype != DType::kI64) return ctx.error("axes input must be i64");
  if (ctx.input(1).shape && ctx.input(1).shape->size() != 1)
    return ctx.error("axes input must be 1-D");
  return input_ints(ctx, 1);
}

Status infer_reduce(InferContext& ctx, std::initializer_list<DType> dtypes) {
  KILN_RETURN_IF_ERROR(require_dtype(ctx, 0, dtypes));
  KILN_ASSIGN_OR_RETURN(std::optional<std::vector<int64_t>> axes, raw_reduce_axes(ctx));
  const bool keepdims = ctx.attrs().get_int("keepdims", 1) != 0;
  const bool noop_if_empty = ctx.attrs().get_int("noop_with_empty_axes", 0) != 0;
  const DType dtype = ctx.input(0).dtype;
  const auto& in = ctx.input(0).shape;
  if (!in) {
    set_output(ctx, 0, dtype, std::nullopt);
    return ok_status();
  }
  const int64_t rank = int64_t(in->size());
  if (!axes) {
    set_output(ctx, 0, dtype, keepdims ? std::optional(unknown_shape(rank)) : std::nullopt);
    return ok_status();
  }
  if (axes->empty() && noop_if_empty) return same_as_input(ctx);
  std::vector<bool> reduced(size_t(rank), axes->empty());
  for (int64_t a : *axes) {
    KILN_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(ctx, a, rank));
    if (reduced[size_t(axis)]) return ctx.error("axis {} is listed twice", a);
    reduced[size_t(axis)] = true;
  }
  SymShape out;
  for (int64_t i = 0; i < rank; ++i) {
    if (!reduced[size_t(i)]) out.push_back((*in)[size_t(i)]);
    else if (keepdims) out.push_back(Dim(1));
  }
  set_output(ctx, 0, dtype, std::move(out));
  return ok_status();
}

}  // namespace

Status infer_Softmax(InferContext& ctx) {
  KILN_RETURN_IF_ERROR(require_dtype(ctx, 0, kFloatTypes));
  if (ctx.input(0).shape)
    KILN_RETURN_IF_ERROR(
        normalize_axis(ctx, ctx.attrs().get_int("axis", -1), int64_t(ctx.input(0).shape->size()))
            .status());
  return same_as_input(ctx);
}

Status infer_LayerNormalization(InferContext& ctx) {
  KILN_RETURN_IF_ERROR(require_dtype(ctx, 0, kFloatTypes));
  for (size_t i : {1, 2})
    if (ctx.has_input(i) && ctx.input(i).dtype != ctx.input(0).dtype)
      return ctx.error("input {} has dtype {}, X has {}", i, dtype_name(ctx.input(i).dtype),
                       dtype_name(ctx.input(0).dtype));
  if (!ctx.has_input(1)) return ctx.error("Scale (input 1) is required");
  if (int64_t stash = ctx.attrs().get_int("stash_type", 1); stash != 1)
    return ctx.unsupported_error("stash_type {} (only 1, f32, is supported)", stash);
  const DType stash_dtype = DType::kF32;
  const auto& in = ctx.input(0).shape;
  if (!in) {
    set_output(ctx, 0, ctx.input(0).dtype, std::nullopt);
    for (size_t i : {1, 2})
      if (i < ctx.num_outputs()) set_output(ctx, i, stash_dtype, std::nullopt);
    return ok_status();
  }
  const int64_t rank = int64_t(in->size());
  if (rank == 0) return ctx.error("X must have rank >= 1");
  KILN_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(ctx, ctx.attrs().get_int("axis", -1), rank));
  // Scale and B broadcast against the normalized dims X.shape[axis:] only.
  for (size_t i : {1, 2}) {
    if (!ctx.has_input(i) || !ctx.input(i).shape) continue;
    const SymShape& p = *ctx.input(i).shape;
    if (int64_t(p.size()) > rank - axis)
      return ctx.unsupported_error("input {} of rank {} spans dims before axis {}", i, p.size(),
                                   axis);
    for (size_t k = 0; k < p.size(); ++k) {
      const Dim& want = (*in)[size_t(rank) - p.size() + k];
      if (p[k].known() && want.known() && p[k].value != 1 && p[k].value != want.value)
        return ctx.error("input {} shape {} does not broadcast to X shape {}", i,
                         sym_shape_to_string(p), sym_shape_to_string(*in));
    }
  }
  set_output(ctx, 0, ctx.input(0).dtype, in);
  SymShape stats(in->begin(), in->begin() + axis);
  stats.resize(size_t(rank), Dim(1));
  for (size_t i : {1, 2})
    if (i < ctx.num_outputs()) set_output(ctx, i, stash_dtype, stats);
  return ok_status();
}

Status infer_InstanceNormalization(InferContext& ctx) {
  KILN_RETURN_IF_ERROR(require_dtype(ctx, 0, kFloatTypes));
  if (!ctx.has_input(1) || !ctx.has_input(2)) return ctx.error("needs input, scale and B");
  for (size_t i : {1, 2}) {
    if (ctx.input(i).dtype != ctx.input(0).dtype)
      return ctx.error("input {} has dtype {}, input 0 has {}", i, dtype_name(ctx.input(i).dtype),
                       dtype_name(ctx.input(0).dtype));
    const auto& p = ctx.input(i).shape;
    if (p && p->size() != 1) return ctx.error("input {} must be 1-D", i);
    const auto& in = ctx.input(0).shape;
    if (p && in && in->size() >= 2 && (*p)[0].known() && (*in)[1].known() &&
        (*p)[0].value != (*in)[1].value)
      return ctx.error("input {} has {} elements for {} channels", i, (*p)[0].value,
                       (*in)[1].value);
  }
  if (ctx.input(0).shape && ctx.input(0).shape->size() < 2)
    return ctx.error("input must have rank >= 2 (N, C, ...)");
  return same_as_input(ctx);
}

Status infer_ReduceMean(InferContext& ctx) { return infer_reduce(ctx, kSumTypes); }
Status infer_ReduceSum(InferContext& ctx) { return infer_reduce(ctx, kSumTypes); }
Status infer_ReduceMax(InferContext& ctx) { return infer_reduce(ctx, kMaxTypes); }

Status infer_ArgMax(InferContext& ctx) {
  KILN_RETURN_IF_ERROR(require_dtype(ctx, 0, kMaxTypes));
  const auto& in = ctx.input(0).shape;
  if (!in) {
    set_output(ctx, 0, DType::kI64, std::nullopt);
    return ok_status();
  }
  KILN_ASSIGN_OR_RETURN(int64_t axis,
                        normalize_axis(ctx, ctx.attrs().get_int("axis", 0), int64_t(in->size())));
  const Dim& reduced = (*in)[size_t(axis)];
  if (reduced.known() && reduced.value == 0) return ctx.error("ArgMax over an empty axis");
  SymShape out = *in;
  if (ctx.attrs().get_int("keepdims", 1) != 0) out[size_t(axis)] = Dim(1);
  else out.erase(out.begin() + axis);
  set_output(ctx, 0, DType::kI64, std::move(out));
  return ok_status();
}

Status infer_CumSum(InferContext& ctx) {
  KILN_RETURN_IF_ERROR(require_dtype(ctx, 0, kSumTypes));
  if (!ctx.has_input(1)) return ctx.error("axis (input 1) is required");
  KILN_RETURN_IF_ERROR(require_dtype(ctx, 1, {DType::kI32, DType::kI64}));
  const auto& axis_shape = ctx.input(1).shape;
  if (axis_shape && sym_numel(*axis_shape).value_or(1) != 1)
    return ctx.error("axis must be a scalar");
  if (auto axis = input_ints(ctx, 1); axis && ctx.input(0).shape) {
    if (axis->size() != 1) return ctx.error("axis must be a scalar");
    KILN_RETURN_IF_ERROR(normalize_axis(ctx, (*axis)[0], int64_t(ctx.input(0).shape->size())).status());
  }
  return same_as_input(ctx);
}

}  // namespace kiln
