// Highway f32 row routines behind the reduction kernels (cpu/reduction.cc),
// compiled for each x86 target Highway knows and chosen at run time. Each
// entry point runs its rows on the OpenMP pool when the work pays for it.
//
// Sums accumulate in f32 vectors within blocks of kBlock elements and add the
// block sums in double, so long rows (GroupNorm: 40960 elements) lose little.
// Max propagates NaN like numpy, which the reference kernels follow.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/reduction_simd.cc"
#include "kernels/cpu/elementwise_simd.h"
#include "kernels/cpu/parallel.h"

#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernels/cpu/unary_ops-inl.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#ifndef KILN_REDUCTION_SIMD_ONCE
#define KILN_REDUCTION_SIMD_ONCE
namespace kiln::reduction_simd {
constexpr int64_t kBlock = 4096;        // multiple of 4 vectors on every target
constexpr int64_t kColumnChunk = 1024;  // accumulator run kept in L1 by Sum/MaxColumns
constexpr float kInf = std::numeric_limits<float>::infinity();
inline float max_nan(float a, float b) { return (a < b || b != b) ? b : a; }
}  // namespace kiln::reduction_simd
#endif

HWY_BEFORE_NAMESPACE();
namespace kiln::reduction_simd::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;
using simd::HWY_NAMESPACE::ExpNonPositive;  // exp(x - max)

// The n < Lanes elements at p, the other lanes set to pad.
HWY_INLINE V LoadTail(D d, const float* p, int64_t n, float pad) {
  HWY_ALIGN float buf[HWY_MAX_BYTES / sizeof(float)];
  for (size_t i = 0; i < hn::Lanes(d); ++i) buf[i] = int64_t(i) < n ? p[i] : pad;
  return hn::Load(d, buf);
}
HWY_INLINE void StoreTail(D d, V v, float* p, int64_t n) {
  HWY_ALIGN float buf[HWY_MAX_BYTES / sizeof(float)];
  hn::Store(v, d, buf);
  std::copy(buf, buf + n, p);
}

HWY_INLINE V MaxNaN(V a, V b) { return hn::IfThenElse(hn::Or(hn::Lt(a, b), hn::IsNaN(b)), b, a); }

// Sum over x[0, n) of f(vector of x).
template <class F>
HWY_INLINE double SumRow(const float* x, int64_t n, const F& f) {
  const D d;
  const int64_t N = int64_t(hn::Lanes(d));
  double total = 0;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t len = std::min(kBlock, n - b);
    const float* p = x + b;
    V a0 = hn::Zero(d), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 4 * N <= len; i += 4 * N) {
      a0 = hn::Add(a0, f(hn::LoadU(d, p + i)));
      a1 = hn::Add(a1, f(hn::LoadU(d, p + i + N)));
      a2 = hn::Add(a2, f(hn::LoadU(d, p + i + 2 * N)));
      a3 = hn::Add(a3, f(hn::LoadU(d, p + i + 3 * N)));
    }
    for (; i + N <= len; i += N) a0 = hn::Add(a0, f(hn::LoadU(d, p + i)));
    if (i < len)
      a1 = hn::Add(a1, hn::IfThenElseZero(hn::FirstN(d, size_t(len - i)), f(LoadTail(d, p + i, len - i, 0))));
    total += double(hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3)))));
  }
  return total;
}

HWY_INLINE float MaxRow(const float* x, int64_t n) {
  const D d;
  const int64_t N = int64_t(hn::Lanes(d));
  V m0 = hn::Set(d, -kInf), m1 = m0;
  int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    m0 = MaxNaN(m0, hn::LoadU(d, x + i));
    m1 = MaxNaN(m1, hn::LoadU(d, x + i + N));
  }
  for (; i + N <= n; i += N) m0 = MaxNaN(m0, hn::LoadU(d, x + i));
  if (i < n) m1 = MaxNaN(m1, LoadTail(d, x + i, n - i, -kInf));
  HWY_ALIGN float lanes[HWY_MAX_BYTES / sizeof(float)];
  hn::Store(MaxNaN(m0, m1), d, lanes);
  float m = -kInf;
  for (size_t k = 0; k < hn::Lanes(d); ++k) m = max_nan(m, lanes[k]);
  return m;
}

HWY_INLINE void SoftmaxRow(const float* x, float* y, int64_t n) {
  const float max = MaxRow(x, n);
  if (!std::isfinite(max)) {
    // A row of -inf, or one holding +inf or NaN: exp(x - max) / sum is NaN throughout.
    std::fill(y, y + n, std::numeric_limits<float>::quiet_NaN());
    return;
  }
  const D d;
  const int64_t N = int64_t(hn::Lanes(d));
  const V vmax = hn::Set(d, max);
  double total = 0;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t end = std::min(b + kBlock, n);
    V a0 = hn::Zero(d), a1 = a0;
    int64_t i = b;
    for (; i + 2 * N <= end; i += 2 * N) {
      const V e0 = ExpNonPositive(d, hn::Sub(hn::LoadU(d, x + i), vmax));
      const V e1 = ExpNonPositive(d, hn::Sub(hn::LoadU(d, x + i + N), vmax));
      hn::StoreU(e0, d, y + i);
      hn::StoreU(e1, d, y + i + N);
      a0 = hn::Add(a0, e0);
      a1 = hn::Add(a1, e1);
    }
    for (; i + N <= end; i += N) {
      const V e = ExpNonPositive(d, hn::Sub(hn::LoadU(d, x + i), vmax));
      hn::StoreU(e, d, y + i);
      a0 = hn::Add(a0, e);
    }
    if (i < end) {  // padding -inf exps to 0
      const V e = ExpNonPositive(d, hn::Sub(LoadTail(d, x + i, end - i, -kInf), vmax));
      StoreTail(d, e, y + i, end - i);
      a1 = hn::Add(a1, e);
    }
    total += double(hn::GetLane(hn::SumOfLanes(d, hn::Add(a0, a1))));
  }
  const float inv = float(1.0 / total);  // total >= 1: the max contributes exp(0)
  const V vinv = hn::Set(d, inv);
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::Mul(hn::LoadU(d, y + i), vinv), d, y + i);
  for (; i < n; ++i) y[i] *= inv;
}

// Mean and 1/sqrt(variance + eps) of x[0, n), two passes for accuracy.
HWY_INLINE void MeanInvStd(const float* x, int64_t n, float eps, float& mean, float& inv_std) {
  const D d;
  const double m = SumRow(x, n, [](V v) { return v; }) / double(n);
  const V vm = hn::Set(d, float(m));
  const double var = SumRow(x, n, [vm](V v) {
                       const V t = hn::Sub(v, vm);
                       return hn::Mul(t, t);
                     }) / double(n);
  mean = float(m);
  inv_std = float(1.0 / std::sqrt(var + double(eps)));
}

// y = (x - mean) * inv_std * scale + bias, scale and bias per element (bias may be null).
HWY_INLINE void NormalizeRow(const float* x, float* y, int64_t n, float mean, float inv_std,
                             const float* scale, const float* bias) {
  const D d;
  const int64_t N = int64_t(hn::Lanes(d));
  const V vmean = hn::Set(d, mean), vinv = hn::Set(d, inv_std);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const V t = hn::Mul(hn::Sub(hn::LoadU(d, x + i), vmean), vinv);
    const V b = bias ? hn::LoadU(d, bias + i) : hn::Zero(d);
    hn::StoreU(hn::MulAdd(t, hn::LoadU(d, scale + i), b), d, y + i);
  }
  for (; i < n; ++i) y[i] = (x[i] - mean) * inv_std * scale[i] + (bias ? bias[i] : 0.0f);
}

// y = x * a + b.
HWY_INLINE void AffineRow(const float* x, float* y, int64_t n, float a, float b) {
  const D d;
  const int64_t N = int64_t(hn::Lanes(d));
  const V va = hn::Set(d, a), vb = hn::Set(d, b);
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::MulAdd(hn::LoadU(d, x + i), va, vb), d, y + i);
  for (; i < n; ++i) y[i] = x[i] * a + b;
}

// acc[i] = op(acc[i], x[i]) for i < n.
template <class VecOp, class ScalarOp>
HWY_INLINE void Accumulate(float* acc, const float* x, int64_t n, const VecOp& vop, const ScalarOp& sop) {
  const D d;
  const int64_t N = int64_t(hn::Lanes(d));
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(vop(hn::LoadU(d, acc + i), hn::LoadU(d, x + i)), d, acc + i);
  for (; i < n; ++i) acc[i] = sop(acc[i], x[i]);
}

// y[o, j] = op over k of x[o, k, j], starting from init, then times scale.
template <class VecOp, class ScalarOp>
HWY_INLINE void ReduceColumns(const float* x, float* y, int64_t outer, int64_t n, int64_t inner,
                              float init, float scale, const VecOp& vop, const ScalarOp& sop) {
  const int64_t chunks = (inner + kColumnChunk - 1) / kColumnChunk;
  parallel_for(outer * chunks, outer * n * inner >= kParallelMinElements, [&](int64_t t) {
    const int64_t o = t / chunks, j = (t % chunks) * kColumnChunk;
    const int64_t len = std::min(kColumnChunk, inner - j);
    float* acc = y + o * inner + j;
    std::fill(acc, acc + len, init);
    for (int64_t k = 0; k < n; ++k) Accumulate(acc, x + (o * n + k) * inner + j, len, vop, sop);
    if (scale != 1) AffineRow(acc, acc, len, scale, 0);
  });
}

void SoftmaxRows(const float* x, float* y, int64_t rows, int64_t n) {
  parallel_for(rows, rows * n >= kParallelMinElements, [&](int64_t r) { SoftmaxRow(x + r * n, y + r * n, n); });
}

void SumRows(const float* x, float* y, int64_t rows, int64_t n, float scale) {
  parallel_for(rows, rows * n >= kParallelMinElements, [&](int64_t r) {
    y[r] = float(SumRow(x + r * n, n, [](V v) { return v; }) * scale);
  });
}

void MaxRows(const float* x, float* y, int64_t rows, int64_t n) {
  parallel_for(rows, rows * n >= kParallelMinElements, [&](int64_t r) { y[r] = MaxRow(x + r * n, n); });
}

void SumColumns(const float* x, float* y, int64_t outer, int64_t n, int64_t inner, float scale) {
  ReduceColumns(x, y, outer, n, inner, 0.0f, scale, [](V a, V b) { return hn::Add(a, b); },
                [](float a, float b) { return a + b; });
}

void MaxColumns(const float* x, float* y, int64_t outer, int64_t n, int64_t inner) {
  ReduceColumns(x, y, outer, n, inner, -kInf, 1.0f, [](V a, V b) { return MaxNaN(a, b); }, max_nan);
}

void LayerNormRows(const float* x, float* y, int64_t rows, int64_t n, float eps, const float* scale,
                   const float* bias, float* mean_out, float* inv_std_out) {
  parallel_for(rows, rows * n >= kParallelMinElements, [&](int64_t r) {
    float mean, inv_std;
    MeanInvStd(x + r * n, n, eps, mean, inv_std);
    NormalizeRow(x + r * n, y + r * n, n, mean, inv_std, scale, bias);
    if (mean_out) mean_out[r] = mean;
    if (inv_std_out) inv_std_out[r] = inv_std;
  });
}

void InstanceNormRows(const float* x, float* y, int64_t rows, int64_t n, int64_t channels,
                      float eps, const float* scale, const float* bias) {
  parallel_for(rows, rows * n >= kParallelMinElements, [&](int64_t r) {
    float mean, inv_std;
    MeanInvStd(x + r * n, n, eps, mean, inv_std);
    const float a = inv_std * scale[r % channels];
    AffineRow(x + r * n, y + r * n, n, a, bias[r % channels] - mean * a);
  });
}

// GroupNorm: row r is one (sample, group): `channels` runs of `spatial`
// elements normalized together, each with its channel's affine.
void GroupNormRows(const float* x, float* y, int64_t rows, int64_t channels, int64_t spatial,
                   int64_t num_channels, float eps, const float* scale, const float* bias, bool silu) {
  const int64_t n = channels * spatial;
  parallel_for(rows, rows * n >= kParallelMinElements, [&](int64_t r) {
    float mean, inv_std;
    MeanInvStd(x + r * n, n, eps, mean, inv_std);
    for (int64_t c = 0; c < channels; ++c) {
      const int64_t channel = (r * channels + c) % num_channels;
      const float a = inv_std * scale[channel];
      AffineRow(x + r * n + c * spatial, y + r * n + c * spatial, spatial, a, bias[channel] - mean * a);
    }
    if (silu) simd::unary_f32(simd::UnaryF32::kSilu, y + r * n, y + r * n, size_t(n), {.alpha = 1.0f});
  });
}

}  // namespace kiln::reduction_simd::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kiln::reduction_simd {

HWY_EXPORT(SoftmaxRows);
HWY_EXPORT(SumRows);
HWY_EXPORT(MaxRows);
HWY_EXPORT(SumColumns);
HWY_EXPORT(MaxColumns);
HWY_EXPORT(LayerNormRows);
HWY_EXPORT(InstanceNormRows);
HWY_EXPORT(GroupNormRows);

// Declared in cpu/reduction.cc (and group_norm_rows in cpu/fused.cc).
void softmax_rows(const float* x, float* y, int64_t rows, int64_t n) {
  HWY_DYNAMIC_DISPATCH(SoftmaxRows)(x, y, rows, n);
}
void sum_rows(const float* x, float* y, int64_t rows, int64_t n, float scale) {
  HWY_DYNAMIC_DISPATCH(SumRows)(x, y, rows, n, scale);
}
void max_rows(const float* x, float* y, int64_t rows, int64_t n) {
  HWY_DYNAMIC_DISPATCH(MaxRows)(x, y, rows, n);
}
void sum_columns(const float* x, float* y, int64_t outer, int64_t n, int64_t inner, float scale) {
  HWY_DYNAMIC_DISPATCH(SumColumns)(x, y, outer, n, inner, scale);
}
void max_columns(const float* x, float* y, int64_t outer, int64_t n, int64_t inner) {
  HWY_DYNAMIC_DISPATCH(MaxColumns)(x, y, outer, n, inner);
}
void layer_norm_rows(const float* x, float* y, int64_t rows, int64_t n, float eps,
                     const float* scale, const float* bias, float* mean, float* inv_std) {
  HWY_DYNAMIC_DISPATCH(LayerNormRows)(x, y, rows, n, eps, scale, bias, mean, inv_std);
}
void instance_norm_rows(const float* x, float* y, int64_t rows, int64_t n, int64_t channels,
                        float eps, const float* scale, const float* bias) {
  HWY_DYNAMIC_DISPATCH(InstanceNormRows)(x, y, rows, n, channels, eps, scale, bias);
}
void group_norm_rows(const float* x, float* y, int64_t rows, int64_t channels, int64_t spatial,
                     int64_t num_channels, float eps, const float* scale, const float* bias, bool silu) {
  HWY_DYNAMIC_DISPATCH(GroupNormRows)(x, y, rows, channels, spatial, num_channels, eps, scale, bias, silu);
}

}  // namespace kiln::reduction_simd
#endif
