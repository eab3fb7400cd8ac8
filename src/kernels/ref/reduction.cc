// ref kernels for the reduction ops (see kernels/kernel.h): plain loops over
// coordinates, accumulating in long double.
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/kernel.h"

namespace kiln {

namespace {

using Real = long double;  // exact for every int64 and f64 the tests use

template <class T>
constexpr bool kIsNumeric = std::is_arithmetic_v<T> && !std::is_same_v<T, bool>;

// Calls fn(T{}) for the plain numeric dtypes; Unsupported for the rest.
template <class Fn>
Status visit_numeric(const KernelContext& ctx, DType dtype, Fn&& fn) {
  return dtype_visit(dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    if constexpr (kIsNumeric<T>) {
      fn(tag);
      return ok_status();
    } else {
      return ctx.unsupported_error("dtype {} is not supported", dtype_name(dtype));
    }
  });
}

template <class T>
T from_real(Real v) {
  if constexpr (std::is_integral_v<T>) return T(std::trunc(v));
  else return T(v);
}

// Sizes of the dims before `axis`, at it, and after it.
struct AxisSplit {
  int64_t outer = 1, n = 1, inner = 1;
};
AxisSplit split_at(const Shape& s, int64_t axis) {
  AxisSplit p;
  for (int64_t d = 0; d < int64_t(s.size()); ++d) (d < axis ? p.outer : d == axis ? p.n : p.inner) *= s[d];
  return p;
}
int64_t wrap_axis(int64_t axis, int64_t rank) { return axis < 0 ? axis + rank : axis; }

enum class Reduce { kSum, kMean, kMax };

// Which input dims the node reduces (infer_<Op> has validated the axes).
std::vector<bool> reduced_dims(const KernelContext& ctx) {
  const int64_t rank = ctx.input(0)->rank();
  std::vector<int64_t> axes;
  if (const auto* attr = ctx.attrs().get_ints("axes")) {
    axes = *attr;
  } else if (const TensorView* t = ctx.input(1)) {
    for (int64_t i = 0; i < t->numel(); ++i) axes.push_back(t->as<int64_t>()[i]);
  }
  std::vector<bool> reduced(size_t(rank), axes.empty());
  if (axes.empty() && ctx.attrs().get_int("noop_with_empty_axes", 0) != 0) reduced.assign(size_t(rank), false);
  for (int64_t a : axes) reduced[size_t(wrap_axis(a, rank))] = true;
  return reduced;
}

template <class T>
void reduce(const TensorView& x, const std::vector<bool>& reduced, Reduce kind, TensorView& y) {
  const Real init = kind != Reduce::kMax ? 0
                    : std::is_floating_point_v<T> ? -std::numeric_limits<Real>::infinity()
                                                  : Real(std::numeric_limits<T>::lowest());
  std::vector<Real> acc(size_t(y.numel()), init);
  std::vector<int64_t> count(size_t(y.numel()), 0);
  const T* in = x.as<T>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    int64_t rest = i, out = 0, out_stride = 1;
    for (int64_t d = x.rank() - 1; d >= 0; --d) {
      const int64_t coord = rest % x.shape[d];
      rest /= x.shape[d];
      if (!reduced[size_t(d)]) {
        out += coord * out_stride;
        out_stride *= x.shape[d];
      }
    }
    const Real v = Real(in[i]);
    if (kind == Reduce::kMax) {
      if (std::isnan(v) || v > acc[out]) acc[out] = v;  // NaN, once in, stays
    } else {
      acc[out] += v;
    }
    ++count[out];
  }
  for (int64_t o = 0; o < y.numel(); ++o) {
    Real v = acc[o];
    if (kind == Reduce::kMean) {
      if constexpr (std::is_integral_v<T>) v = count[o] ? v / count[o] : 0;
      else v = v / count[o];
    }
    y.as<T>()[o] = from_real<T>(v);
  }
}

Status reduce_op(KernelContext& ctx, Reduce kind) {
  const std::vector<bool> reduced = reduced_dims(ctx);
  return visit_numeric(ctx, ctx.input(0)->dtype, [&](auto tag) {
    reduce<decltype(tag)>(*ctx.input(0), reduced, kind, *ctx.output(0));
  });
}

template <class T>
void softmax(const T* x, T* y, AxisSplit p) {
  for (int64_t o = 0; o < p.outer; ++o)
    for (int64_t i = 0; i < p.inner; ++i) {
      auto at = [&](int64_t k) { return o * p.n * p.inner + k * p.inner + i; };
      Real m = -std::numeric_limits<Real>::infinity();
      for (int64_t k = 0; k < p.n; ++k) m = std::max(m, Real(x[at(k)]));
      Real sum = 0;
      for (int64_t k = 0; k < p.n; ++k) sum += std::exp(Real(x[at(k)]) - m);
      for (int64_t k = 0; k < p.n; ++k) y[at(k)] = T(std::exp(Real(x[at(k)]) - m) / sum);
    }
}

// Index into a parameter of shape `param` broadcast against `dims` (aligned
// at the trailing end) for the element at row-major position j of `dims`.
int64_t broadcast_index(int64_t j, const Shape& dims, const Shape& param) {
  int64_t index = 0, stride = 1;
  for (int64_t d = int64_t(dims.size()) - 1, k = int64_t(param.size()) - 1; d >= 0; --d, --k) {
    const int64_t coord = j % dims[d];
    j /= dims[d];
    if (k >= 0) {
      if (param[k] != 1) index += coord * stride;
      stride *= param[k];
    }
  }
  return index;
}

}  // namespace

Status ref_Softmax(KernelContext& ctx) {
  const TensorView& x = *ctx.input(0);
  if (x.dtype != DType::kF32) return ctx.unsupported_error("dtype {}", dtype_name(x.dtype));
  const int64_t axis = wrap_axis(ctx.attrs().get_int("axis", -1), x.rank());
  softmax(x.as<float>(), ctx.output(0)->as<float>(), split_at(x.shape, axis));
  return ok_status();
}

Status ref_LayerNormalization(KernelContext& ctx) {
  const TensorView& x = *ctx.input(0);
  if (x.dtype != DType::kF32) return ctx.unsupported_error("dtype {}", dtype_name(x.dtype));
  const int64_t axis = wrap_axis(ctx.attrs().get_int("axis", -1), x.rank());
  const Real eps = ctx.attrs().get_float("epsilon", 1e-5f);
  const AxisSplit p = split_at(x.shape, axis);
  const int64_t rows = p.outer, cols = p.n * p.inner;
  const Shape dims(x.shape.begin() + axis, x.shape.end());
  const TensorView* scale = ctx.input(1);
  const TensorView* bias = ctx.input(2);
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = x.as<float>() + r * cols;
    float* out = ctx.output(0)->as<float>() + r * cols;
    Real mean = 0, var = 0;
    for (int64_t j = 0; j < cols; ++j) mean += in[j];
    mean /= cols;
    for (int64_t j = 0; j < cols; ++j) var += (in[j] - mean) * (in[j] - mean);
    var /= cols;
    const Real inv_std = 1 / std::sqrt(var + eps);
    for (int64_t j = 0; j < cols; ++j) {
      Real v = (in[j] - mean) * inv_std * scale->as<float>()[broadcast_index(j, dims, scale->shape)];
      if (bias) v += bias->as<float>()[broadcast_index(j, dims, bias->shape)];
      out[j] = float(v);
    }
    if (TensorView* m = ctx.output(1)) m->as<float>()[r] = float(mean);
    if (TensorView* s = ctx.output(2)) s->as<float>()[r] = float(inv_std);
  }
  return ok_status();
}

Status ref_InstanceNormalization(KernelContext& ctx) {
  const TensorView& x = *ctx.input(0);
  if (x.dtype != DType::kF32) return ctx.unsupported_error("dtype {}", dtype_name(x.dtype));
  const Real eps = ctx.attrs().get_float("epsilon", 1e-5f);
  const AxisSplit p = split_at(x.shape, 1);  // outer = N, n = C, inner = spatial
  for (int64_t b = 0; b < p.outer; ++b)
    for (int64_t c = 0; c < p.n; ++c) {
      const float* in = x.as<float>() + (b * p.n + c) * p.inner;
      float* out = ctx.output(0)->as<float>() + (b * p.n + c) * p.inner;
      Real mean = 0, var = 0;
      for (int64_t j = 0; j < p.inner; ++j) mean += in[j];
      mean /= p.inner;
      for (int64_t j = 0; j < p.inner; ++j) var += (in[j] - mean) * (in[j] - mean);
      var /= p.inner;
      const Real inv_std = 1 / std::sqrt(var + eps);
      for (int64_t j = 0; j < p.inner; ++j)
        out[j] = float((in[j] - mean) * inv_std * ctx.input(1)->as<float>()[c] +
                       ctx.input(2)->as<float>()[c]);
    }
  return ok_status();
}

Status ref_ReduceMean(KernelContext& ctx) { return reduce_op(ctx, Reduce::kMean); }
Status ref_ReduceSum(KernelContext& ctx) { return reduce_op(ctx, Reduce::kSum); }
Status ref_ReduceMax(KernelContext& ctx) { return reduce_op(ctx, Reduce::kMax); }

Status ref_ArgMax(KernelContext& ctx) {
  const TensorView& x = *ctx.input(0);
  const AxisSplit p = split_at(x.shape, wrap_axis(ctx.attrs().get_int("axis", 0), x.rank()));
  const bool last = ctx.attrs().get_int("select_last_index", 0) != 0;
  return visit_numeric(ctx, x.dtype, [&](auto tag) {
    using T = decltype(tag);
    for (int64_t o = 0; o < p.outer; ++o)
      for (int64_t i = 0; i < p.inner; ++i) {
        auto at = [&](int64_t k) { return x.as<T>()[o * p.n * p.inner + k * p.inner + i]; };
        int64_t best = 0;
        for (int64_t k = 1; k < p.n; ++k)
          if (at(k) > at(best) || (last && at(k) == at(best))) best = k;
        ctx.output(0)->as<int64_t>()[o * p.inner + i] = best;
      }
  });
}

Status ref_CumSum(KernelContext& ctx) {
  const TensorView& x = *ctx.input(0);
  const TensorView& axis = *ctx.input(1);
  const int64_t a = axis.dtype == DType::kI32 ? axis.as<int32_t>()[0] : axis.as<int64_t>()[0];
  const AxisSplit p = split_at(x.shape, wrap_axis(a, x.rank()));
  const bool exclusive = ctx.attrs().get_int("exclusive", 0) != 0;
  const bool reverse = ctx.attrs().get_int("reverse", 0) != 0;
  return visit_numeric(ctx, x.dtype, [&](auto tag) {
    using T = decltype(tag);
    for (int64_t o = 0; o < p.outer; ++o)
      for (int64_t i = 0; i < p.inner; ++i) {
        Real sum = 0;
        for (int64_t step = 0; step < p.n; ++step) {
          const int64_t k = reverse ? p.n - 1 - step : step;
          const int64_t at = o * p.n * p.inner + k * p.inner + i;
          if (exclusive) ctx.output(0)->as<T>()[at] = from_real<T>(sum);
          sum += Real(x.as<T>()[at]);
          if (!exclusive) ctx.output(0)->as<T>()[at] = from_real<T>(sum);
        }
      }
  });
}

}  // namespace kiln
