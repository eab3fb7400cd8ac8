// Shape inference for the creation ops (see ir/shape_inference.h).
#include <algorithm>
#include <cmath>

#include "ir/infer/infer_util.h"

namespace kiln {

namespace {

// Error unless input i holds one element (a scalar, or a 1-element tensor).
Status require_scalar(const InferContext& ctx, size_t i, std::string_view what) {
  const auto& s = ctx.input(i).shape;
  if (s && sym_numel(*s).value_or(1) != 1) return ctx.error("{} must be a scalar", what);
  return ok_status();
}

// The element count of Range(start, limit, delta): max(ceil((limit - start) / delta), 0),
// exact for integers.
Result<int64_t> range_length(const InferContext& ctx, const Tensor& start, const Tensor& limit,
                             const Tensor& delta) {
  if (!dtype_is_float(start.dtype())) {
    __int128 s = start.element_as_int(0), l = limit.element_as_int(0), d = delta.element_as_int(0);
    if (d == 0) return ctx.error("delta is 0");
    __int128 span = d > 0 ? l - s : s - l, step = d > 0 ? d : -d;
    __int128 n = span <= 0 ? 0 : (span + step - 1) / step;
    if (n > kMaxTensorElements) return ctx.error("Range would have {} elements", double(n));
    return int64_t(n);
  }
  double s = start.element_as_double(0), l = limit.element_as_double(0), d = delta.element_as_double(0);
  if (!std::isfinite(s) || !std::isfinite(l) || !std::isfinite(d))
    return ctx.error("start, limit and delta must be finite");
  if (d == 0) return ctx.error("delta is 0");
  double n = std::max(std::ceil((l - s) / d), 0.0);
  if (!(n <= double(kMaxTensorElements))) return ctx.error("Range would have {} elements", n);
  return int64_t(n);
}

}  // namespace

Status infer_Shape(InferContext& ctx) {
  const auto& in = ctx.input(0).shape;
  if (!in) {
    set_output(ctx, 0, DType::kI64, SymShape{Dim()});
    return ok_status();
  }
  const int64_t rank = int64_t(in->size());
  auto clamp_to_rank = [rank](int64_t i) { return std::clamp(i < 0 ? i + rank : i, int64_t(0), rank); };
  const int64_t start = clamp_to_rank(ctx.attrs().get_int("start", 0));
  const int64_t end = clamp_to_rank(ctx.attrs().get_int("end", rank));
  const int64_t n = std::max(end - start, int64_t(0));
  set_output(ctx, 0, DType::kI64, SymShape{Dim(n)});
  // Later shape arithmetic folds when the dims are known.
  std::vector<int64_t> dims;
  for (int64_t i = start; i < start + n; ++i) {
    if (!(*in)[size_t(i)].known()) return ok_status();
    dims.push_back((*in)[size_t(i)].value);
  }
  KILN_ASSIGN_OR_RETURN(ctx.output(0).value, Tensor::from_vector<int64_t>({n}, dims));
  return ok_status();
}

Status infer_ConstantOfShape(InferContext& ctx) {
  DType dtype = DType::kF32;
  if (ctx.attrs().has("value")) {
    const Tensor* value = ctx.attrs().get_tensor("value");
    if (!value || value->numel() != 1) return ctx.error("value must be a one-element tensor");
    dtype = value->dtype();
  }
  KILN_RETURN_IF_ERROR(require_dtype(ctx, 0, {DType::kI64}));
  const auto& s = ctx.input(0).shape;
  if (s && s->size() != 1) return ctx.error("the shape input must be 1-D");
  if (auto dims = input_ints(ctx, 0)) {
    for (int64_t d : *dims)
      if (d < 0) return ctx.error("negative dimension {} in shape", d);
    KILN_RETURN_IF_ERROR(shape_numel_checked(*dims).status().with_context(node_label(ctx.node())));
    set_output(ctx, 0, dtype, sym_shape_from(*dims));
  } else if (s && (*s)[0].known()) {
    set_output(ctx, 0, dtype, unknown_shape((*s)[0].value));
  } else {
    set_output(ctx, 0, dtype, std::nullopt);
  }
  return ok_status();
}

Status infer_Range(InferContext& ctx) {
  KILN_RETURN_IF_ERROR(require_dtype(ctx, 0, {DType::kF32, DType::kF64, DType::kI32, DType::kI64}));
  const char* names[] = {"start", "limit", "delta"};
  for (size_t i = 0; i < 3; ++i) {
    if (!ctx.has_input(i)) return ctx.error("{} (input {}) is required", names[i], i);
    if (ctx.input(i).dtype != ctx.input(0).dtype)
      return ctx.error("{} has dtype {}, start has {}", names[i], dtype_name(ctx.input(i).dtype),
                       dtype_name(ctx.input(0).dtype));
    KILN_RETURN_IF_ERROR(require_scalar(ctx, i, names[i]));
  }
  SymShape out{Dim()};
  if (ctx.input(0).value && ctx.input(1).value && ctx.input(2).value) {
    KILN_ASSIGN_OR_RETURN(out[0], range_length(ctx, *ctx.input(0).value, *ctx.input(1).value,
                                               *ctx.input(2).value));
  }
  set_output(ctx, 0, ctx.input(0).dtype, std::move(out));
  return ok_status();
}

Status infer_Trilu(InferContext& ctx) {
  const auto& in = ctx.input(0).shape;
  if (in && in->size() < 2) return ctx.error("input must have rank >= 2");
  if (ctx.has_input(1)) {
    KILN_RETURN_IF_ERROR(require_dtype(ctx, 1, {DType::kI64}));
    KILN_RETURN_IF_ERROR(require_scalar(ctx, 1, "k"));
  }
  set_output(ctx, 0, ctx.input(0).dtype, in);
  return ok_status();
}

}  // namespace kiln
