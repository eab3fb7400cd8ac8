// cpu kernels for the reduction ops (see kernels/kernel.h).
//
// f32 takes the Highway paths in reduction_simd.cc for the patterns diffusion
// models hit: Softmax over the last axis, LayerNormalization, InstanceNormalization
// (GroupNorm), and ReduceSum/Mean/Max whose reduced dims form one run, trailing
// ([rows, n]) or between kept ones ([outer, n, inner]). Other dtypes and axis
// patterns use plain strided loops.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <span>
#include <type_traits>

#include "kernels/cpu/parallel.h"
#include "kernels/cpu/reduction_simd.h"
#include "kernels/kernel.h"

namespace kiln {

namespace {

constexpr int64_t kMaxRank = 64;

template <class T>
constexpr bool kIsNumeric = std::is_arithmetic_v<T> && !std::is_same_v<T, bool>;

// Calls fn(T{}) for the plain numeric dtypes; Unsupported for the rest.
template <class Fn>
Status visit_numeric(const KernelContext& ctx, DType dtype, Fn&& fn) {
  return dtype_visit(dtype, [&](auto tag) -> Status {
    if constexpr (kIsNumeric<decltype(tag)>) {
      fn(tag);
      return ok_status();
    } else {
      return ctx.unsupported_error("dtype {} is not supported", dtype_name(dtype));
    }
  });
}

template <class T>
T max_nan(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) return (a < b || b != b) ? b : a;
  else return std::max(a, b);
}

// Integer adds wrap (as numpy's do) instead of overflowing into UB.
template <class T>
T wrapping_add(T a, T b) {
  if constexpr (std::is_integral_v<T>) return T(std::make_unsigned_t<T>(a) + std::make_unsigned_t<T>(b));
  else return a + b;
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

// A reduction's input dims with size-1 dims dropped and neighbours of the same
// kind merged into runs; runs alternate kept, reduced, kept, ...
struct ReduceRuns {
  int count = 0;
  int64_t size[kMaxRank];
  bool reduced[kMaxRank];

  // [outer, n, inner] when the reduced dims form at most one run.
  std::optional<AxisSplit> as_split() const {
    AxisSplit p;
    int reduced_runs = 0;
    for (int r = 0; r < count; ++r) {
      if (reduced[r]) ++reduced_runs, p.n = size[r];
      else (reduced_runs ? p.inner : p.outer) *= size[r];
    }
    if (reduced_runs > 1) return std::nullopt;
    return p;
  }
};

// The runs of a Reduce* node (infer_<Op> has validated the axes).
Result<ReduceRuns> reduce_runs(const KernelContext& ctx) {
  const TensorView& x = *ctx.input(0);
  if (x.rank() > kMaxRank) return ctx.unsupported_error("rank {} > {}", x.rank(), kMaxRank);
  uint64_t mask = 0;
  const std::vector<int64_t>* attr = ctx.attrs().get_ints("axes");
  const TensorView* input = ctx.input(1);
  const int64_t num_axes = attr ? int64_t(attr->size()) : input ? input->numel() : 0;
  for (int64_t i = 0; i < num_axes; ++i)
    mask |= uint64_t(1) << wrap_axis(attr ? (*attr)[size_t(i)] : input->as<int64_t>()[i], x.rank());
  if (num_axes == 0 && ctx.attrs().get_int("noop_with_empty_axes", 0) == 0) mask = ~uint64_t(0);
  ReduceRuns runs;
  for (int64_t d = 0; d < x.rank(); ++d) {
    if (x.shape[d] == 1) continue;
    const bool reduced = (mask >> d) & 1;
    if (runs.count > 0 && runs.reduced[runs.count - 1] == reduced) {
      runs.size[runs.count - 1] *= x.shape[d];
    } else {
      runs.size[runs.count] = x.shape[d];
      runs.reduced[runs.count++] = reduced;
    }
  }
  return runs;
}

// Sum (or mean) accumulating in double, or wrapping in 64 bits for integers.
template <class T>
struct SumOp {
  using Acc = std::conditional_t<std::is_floating_point_v<T>, double, uint64_t>;
  bool mean;
  Acc init() const { return 0; }
  Acc add(Acc a, T v) const { return a + Acc(v); }
  T finish(Acc a, int64_t count) const {
    if constexpr (std::is_floating_point_v<T>) {
      return T(mean ? a / double(count) : a);  // an empty mean is 0/0 = NaN, as in numpy
    } else {
      const int64_t sum = int64_t(a);
      return T(!mean ? sum : count ? sum / count : 0);
    }
  }
};

template <class T>
struct MaxOp {
  using Acc = T;
  T init() const {
    if constexpr (std::is_floating_point_v<T>) return -std::numeric_limits<T>::infinity();
    else return std::numeric_limits<T>::lowest();
  }
  T add(T a, T v) const { return max_nan(a, v); }
  T finish(T a, int64_t) const { return a; }
};

// Any reduction: per output, walk the reduced runs with an odometer.
template <class T, class Op>
void reduce_strided(const T* x, T* y, const ReduceRuns& runs, const Op& op) {
  int64_t kept_size[kMaxRank], kept_stride[kMaxRank], red_size[kMaxRank], red_stride[kMaxRank];
  int kept_rank = 0, red_rank = 0;
  int64_t outputs = 1, count = 1, stride = 1;
  for (int r = runs.count - 1; r >= 0; --r) {
    if (runs.reduced[r]) {
      red_size[red_rank] = runs.size[r], red_stride[red_rank++] = stride, count *= runs.size[r];
    } else {
      kept_size[kept_rank] = runs.size[r], kept_stride[kept_rank++] = stride, outputs *= runs.size[r];
    }
    stride *= runs.size[r];
  }
  parallel_for(outputs, outputs * count >= kParallelMinElements, [&](int64_t o) {
    int64_t base = 0;
    for (int64_t k = 0, rest = o; k < kept_rank; ++k) {  // runs are stored innermost first
      base += (rest % kept_size[k]) * kept_stride[k];
      rest /= kept_size[k];
    }
    int64_t index[kMaxRank] = {}, offset = 0;
    typename Op::Acc acc = op.init();
    for (int64_t i = 0; i < count; ++i) {
      acc = op.add(acc, x[base + offset]);
      for (int k = 0; k < red_rank; ++k) {
        offset += red_stride[k];
        if (++index[k] < red_size[k]) break;
        offset -= index[k] * red_stride[k];
        index[k] = 0;
      }
    }
    y[o] = op.finish(acc, count);
  });
}

enum class Reduce { kSum, kMean, kMax };

Status reduce_op(KernelContext& ctx, Reduce kind) {
  KILN_ASSIGN_OR_RETURN(ReduceRuns runs, reduce_runs(ctx));
  const TensorView& x = *ctx.input(0);
  TensorView& y = *ctx.output(0);
  const std::optional<AxisSplit> split = runs.as_split();
  if (x.dtype == DType::kF32 && split) {
    const auto [outer, n, inner] = *split;
    const float scale = kind == Reduce::kMean ? 1.0f / float(n) : 1.0f;  // n == 0: inf, mean NaN
    if (kind == Reduce::kMax) {
      if (inner == 1) reduction_simd::max_rows(x.as<float>(), y.as<float>(), outer, n);
      else reduction_simd::max_columns(x.as<float>(), y.as<float>(), outer, n, inner);
    } else {
      if (inner == 1) reduction_simd::sum_rows(x.as<float>(), y.as<float>(), outer, n, scale);
      else reduction_simd::sum_columns(x.as<float>(), y.as<float>(), outer, n, inner, scale);
    }
    return ok_status();
  }
  return visit_numeric(ctx, x.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (kind == Reduce::kMax) reduce_strided(x.as<T>(), y.as<T>(), runs, MaxOp<T>{});
    else reduce_strided(x.as<T>(), y.as<T>(), runs, SumOp<T>{kind == Reduce::kMean});
  });
}

// Softmax along a middle axis: each (outer, inner) column in place in y.
void softmax_strided(const float* x, float* y, AxisSplit p) {
  parallel_for(p.outer * p.inner, p.outer * p.n * p.inner >= kParallelMinElements, [&](int64_t t) {
    const int64_t first = (t / p.inner) * p.n * p.inner + t % p.inner;
    float max = -std::numeric_limits<float>::infinity();
    for (int64_t k = 0; k < p.n; ++k) max = max_nan(max, x[first + k * p.inner]);
    double sum = 0;
    for (int64_t k = 0; k < p.n; ++k) {
      const int64_t at = first + k * p.inner;
      y[at] = std::exp(x[at] - max);  // NaN throughout when max is not finite, as the spec's formula gives
      sum += y[at];
    }
    const float inv = float(1 / sum);
    for (int64_t k = 0; k < p.n; ++k) y[first + k * p.inner] *= inv;
  });
}

// A LayerNormalization parameter as `cols` contiguous floats: the tensor
// itself, or its broadcast over the normalized dims written into scratch.
Result<const float*> expand_param(const KernelContext& ctx, const TensorView* param,
                                  std::span<const int64_t> dims, int64_t cols) {
  if (!param || param->numel() == cols) return param ? param->as<const float>() : nullptr;
  auto* out = static_cast<float*>(ctx.workspace->scratch(size_t(cols) * sizeof(float)));
  if (!out) return resource_exhausted("{}: no scratch for {} floats", node_label(*ctx.node), cols);
  const int64_t skip = int64_t(dims.size()) - param->rank();
  for (int64_t j = 0; j < cols; ++j) {
    int64_t index = 0, rest = j, stride = 1;
    for (int64_t d = int64_t(dims.size()) - 1; d >= skip; --d) {
      const int64_t size = param->shape[d - skip];
      if (size != 1) index += (rest % dims[d]) * stride;
      rest /= dims[d];
      stride *= size;
    }
    out[j] = param->as<const float>()[index];
  }
  return const_cast<const float*>(out);
}

}  // namespace

Status cpu_Softmax(KernelContext& ctx) {
  const TensorView& x = *ctx.input(0);
  if (x.dtype != DType::kF32) return ctx.unsupported_error("dtype {}", dtype_name(x.dtype));
  const AxisSplit p = split_at(x.shape, wrap_axis(ctx.attrs().get_int("axis", -1), x.rank()));
  if (p.inner == 1) reduction_simd::softmax_rows(x.as<float>(), ctx.output(0)->as<float>(), p.outer, p.n);
  else softmax_strided(x.as<float>(), ctx.output(0)->as<float>(), p);
  return ok_status();
}

Status cpu_LayerNormalization(KernelContext& ctx) {
  const TensorView& x = *ctx.input(0);
  if (x.dtype != DType::kF32) return ctx.unsupported_error("dtype {}", dtype_name(x.dtype));
  const int64_t axis = wrap_axis(ctx.attrs().get_int("axis", -1), x.rank());
  const AxisSplit p = split_at(x.shape, axis);
  const int64_t cols = p.n * p.inner;
  const std::span<const int64_t> dims(x.shape.begin() + axis, x.shape.end());
  KILN_ASSIGN_OR_RETURN(const float* scale, expand_param(ctx, ctx.input(1), dims, cols));
  KILN_ASSIGN_OR_RETURN(const float* bias, expand_param(ctx, ctx.input(2), dims, cols));
  TensorView* mean = ctx.output(1);
  TensorView* inv_std = ctx.output(2);
  reduction_simd::layer_norm_rows(x.as<float>(), ctx.output(0)->as<float>(), p.outer, cols,
                                  ctx.attrs().get_float("epsilon", 1e-5f), {.scale = scale, .bias = bias},
                                  mean ? mean->as<float>() : nullptr,
                                  inv_std ? inv_std->as<float>() : nullptr);
  return ok_status();
}

Status cpu_InstanceNormalization(KernelContext& ctx) {
  const TensorView& x = *ctx.input(0);
  if (x.dtype != DType::kF32) return ctx.unsupported_error("dtype {}", dtype_name(x.dtype));
  const AxisSplit p = split_at(x.shape, 1);  // outer = N, n = C, inner = spatial
  reduction_simd::instance_norm_rows(x.as<float>(), ctx.output(0)->as<float>(), p.outer * p.n,
                                     p.inner, p.n, ctx.attrs().get_float("epsilon", 1e-5f),
                                     ctx.input(1)->as<float>(), ctx.input(2)->as<float>());
  return ok_status();
}

Status cpu_ReduceMean(KernelContext& ctx) { return reduce_op(ctx, Reduce::kMean); }
Status cpu_ReduceSum(KernelContext& ctx) { return reduce_op(ctx, Reduce::kSum); }
Status cpu_ReduceMax(KernelContext& ctx) { return reduce_op(ctx, Reduce::kMax); }

Status cpu_ArgMax(KernelContext& ctx) {
  const TensorView& x = *ctx.input(0);
  const AxisSplit p = split_at(x.shape, wrap_axis(ctx.attrs().get_int("axis", 0), x.rank()));
  const bool last = ctx.attrs().get_int("select_last_index", 0) != 0;
  int64_t* y = ctx.output(0)->as<int64_t>();
  return visit_numeric(ctx, x.dtype, [&](auto tag) {
    using T = decltype(tag);
    parallel_for(p.outer * p.inner, x.numel() >= kParallelMinElements, [&](int64_t t) {
      const T* col = x.as<T>() + (t / p.inner) * p.n * p.inner + t % p.inner;
      T best = col[0];
      int64_t best_k = 0;
      for (int64_t k = 1; k < p.n; ++k) {
        const T v = col[k * p.inner];
        if (v > best || (last && v == best)) best = v, best_k = k;
      }
      y[t] = best_k;
    });
  });
}

Status cpu_CumSum(KernelContext& ctx) {
  const TensorView& x = *ctx.input(0);
  const TensorView& axis = *ctx.input(1);
  const int64_t a = axis.dtype == DType::kI32 ? axis.as<int32_t>()[0] : axis.as<int64_t>()[0];
  const AxisSplit p = split_at(x.shape, wrap_axis(a, x.rank()));
  const bool exclusive = ctx.attrs().get_int("exclusive", 0) != 0;
  const bool reverse = ctx.attrs().get_int("reverse", 0) != 0;
  return visit_numeric(ctx, x.dtype, [&](auto tag) {
    using T = decltype(tag);
    // Row k of a slab is the inner-sized run at k; each output row is the
    // previous output row plus one input row, which vectorizes over inner.
    parallel_for(p.outer, x.numel() >= kParallelMinElements, [&](int64_t o) {
      const T* in = x.as<T>() + o * p.n * p.inner;
      T* out = ctx.output(0)->as<T>() + o * p.n * p.inner;
      for (int64_t step = 0; step < p.n; ++step) {
        const int64_t k = reverse ? p.n - 1 - step : step;
        const int64_t prev = reverse ? k + 1 : k - 1;
        T* row = out + k * p.inner;
        if (step == 0) {
          if (exclusive) std::fill(row, row + p.inner, T(0));
          else std::copy(in + k * p.inner, in + (k + 1) * p.inner, row);
          continue;
        }
        const T* add = in + (exclusive ? prev : k) * p.inner;
        const T* before = out + prev * p.inner;
        for (int64_t i = 0; i < p.inner; ++i) row[i] = wrapping_add(before[i], add[i]);
      }
    });
  });
}

}  // namespace kiln
