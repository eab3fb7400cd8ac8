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
#include "kernels/cpu/reduction_simd.h"
#include "kernels/cpu/simd_targets.h"

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

// The sums over kRows rows of n (n apart, from x) of f(r, vector of row r),
// into total[r]. The rows' adds go in turn, so that each row's chain of
// dependent adds, and its reduction at the end, overlap the others': one row
// has four accumulators, more rows fewer each.
template <int kRows, class F>
HWY_INLINE void SumRowsTogether(const float* x, int64_t n, const F& f, double* total) {
  constexpr int kAccumulators = kRows >= 4 ? 1 : 4 / kRows;
  const D d;
  const int64_t N = int64_t(hn::Lanes(d));
  for (int r = 0; r < kRows; ++r) total[r] = 0;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t len = std::min(kBlock, n - b);
    const float* p = x + b;
    V acc[kRows][kAccumulators];
    for (auto& row : acc)
      for (V& a : row) a = hn::Zero(d);
    int64_t i = 0;
    for (; i + kAccumulators * N <= len; i += kAccumulators * N)
      for (int u = 0; u < kAccumulators; ++u)
        for (int r = 0; r < kRows; ++r) acc[r][u] = hn::Add(acc[r][u], f(r, hn::LoadU(d, p + r * n + i + u * N)));
    for (; i + N <= len; i += N)
      for (int r = 0; r < kRows; ++r) acc[r][0] = hn::Add(acc[r][0], f(r, hn::LoadU(d, p + r * n + i)));
    if (i < len)
      for (int r = 0; r < kRows; ++r)
        acc[r][0] = hn::Add(acc[r][0], hn::IfThenElseZero(hn::FirstN(d, size_t(len - i)),
                                                          f(r, LoadTail(d, p + r * n + i, len - i, 0))));
    for (int r = 0; r < kRows; ++r) {
      V sum = acc[r][0];
      for (int u = 1; u < kAccumulators; ++u) sum = hn::Add(sum, acc[r][u]);
      total[r] += double(hn::GetLane(hn::SumOfLanes(d, sum)));
    }
  }
}
template <class F>
HWY_INLINE double SumRow(const float* x, int64_t n, const F& f) {
  double total;
  SumRowsTogether<1>(x, n, [&f](int, V v) { return f(v); }, &total);
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

// Mean and 1/sqrt(variance + eps) of kRows rows of n (n apart, from x), two
// passes for accuracy.
template <int kRows>
HWY_INLINE void MeanInvStd(const float* x, int64_t n, float eps, float* mean, float* inv_std) {
  const D d;
  double sum[kRows], squares[kRows];
  SumRowsTogether<kRows>(x, n, [](int, V v) { return v; }, sum);
  V vmean[kRows];
  for (int r = 0; r < kRows; ++r) mean[r] = float(sum[r] / double(n)), vmean[r] = hn::Set(d, mean[r]);
  SumRowsTogether<kRows>(x, n, [&vmean](int r, V v) {
    const V t = hn::Sub(v, vmean[r]);
    return hn::Mul(t, t);
  }, squares);
  for (int r = 0; r < kRows; ++r) inv_std[r] = float(1.0 / std::sqrt(squares[r] / double(n) + double(eps)));
}
HWY_INLINE void MeanInvStd(const float* x, int64_t n, float eps, float& mean, float& inv_std) {
  MeanInvStd<1>(x, n, eps, &mean, &inv_std);
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

// y = (x - shift) * a + b. The shift comes first, not folded into b as
// b - shift * a: where a norm's row is nearly constant, a = inv_std is large
// and x * a and shift * a cancel, leaving an error of an ulp of shift * a
// (without FMA, of both products), 6e-5 where the result is near 1.7.
HWY_INLINE void AffineRow(const float* x, float* y, int64_t n, float shift, float a, float b) {
  const D d;
  const int64_t N = int64_t(hn::Lanes(d));
  const V vshift = hn::Set(d, shift), va = hn::Set(d, a), vb = hn::Set(d, b);
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::MulAdd(hn::Sub(hn::LoadU(d, x + i), vshift), va, vb), d, y + i);
  for (; i < n; ++i) y[i] = (x[i] - shift) * a + b;
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
    if (scale != 1) AffineRow(acc, acc, len, 0, scale, 0);
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

// Rows in groups of four, whose statistics are taken together (see
// SumRowsTogether): faster on rows warm in the caches; in a model, where
// half of each row comes from the other core's cache, the difference is
// lost in the noise (docs/performance.md#layernorm).
void LayerNormRows(const float* x, float* y, int64_t rows, int64_t n, float eps, const RowAffine& affine,
                   float* mean_out, float* inv_std_out) {
  constexpr int64_t kAtOnce = 4;
  auto normalize = [&]<int kRows>(int64_t r0) {
    float mean[kRows], inv_std[kRows];
    MeanInvStd<kRows>(x + r0 * n, n, eps, mean, inv_std);
    for (int i = 0; i < kRows; ++i) {
      const int64_t r = r0 + i, step = r / affine.rows_per_step;
      NormalizeRow(x + r * n, y + r * n, n, mean[i], inv_std[i], affine.scale + step * affine.scale_step,
                   affine.bias ? affine.bias + step * affine.bias_step : nullptr);
      if (mean_out) mean_out[r] = mean[i];
      if (inv_std_out) inv_std_out[r] = inv_std[i];
    }
  };
  parallel_for((rows + kAtOnce - 1) / kAtOnce, rows * n >= kParallelMinElements, [&](int64_t group) {
    const int64_t r0 = group * kAtOnce;
    if (r0 + kAtOnce <= rows) return normalize.template operator()<kAtOnce>(r0);
    for (int64_t r = r0; r < rows; ++r) normalize.template operator()<1>(r);
  });
}

void InstanceNormRows(const float* x, float* y, int64_t rows, int64_t n, int64_t channels,
                      float eps, const float* scale, const float* bias) {
  parallel_for(rows, rows * n >= kParallelMinElements, [&](int64_t r) {
    float mean, inv_std;
    MeanInvStd(x + r * n, n, eps, mean, inv_std);
    const float a = inv_std * scale[r % channels];
    AffineRow(x + r * n, y + r * n, n, mean, a, bias[r % channels]);
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
      AffineRow(x + r * n + c * spatial, y + r * n + c * spatial, spatial, mean, a, bias[channel]);
    }
    if (silu) simd::unary_f32(simd::UnaryF32::kSilu, y + r * n, y + r * n, size_t(n), {.alpha = 1.0f});
  });
}

// RMSNorm of n values kept `inner` apart (inner 1: rows), each block of
// columns reduced into a stack buffer, then scaled per channel.
void RmsNorm(const float* x, float* y, int64_t outer, int64_t n, int64_t inner, float eps, const float* scale,
             bool silu) {
  const D d;
  const int64_t N = int64_t(hn::Lanes(d));
  if (inner == 1) {
    parallel_for(outer, outer * n >= kParallelMinElements, [&](int64_t r) {
      const float* row = x + r * n;
      const double squares = SumRow(row, n, [](V v) { return hn::Mul(v, v); });
      const float inv = float(1.0 / std::sqrt(squares / double(n) + double(eps)));
      const V vinv = hn::Set(d, inv);
      float* out = y + r * n;
      int64_t i = 0;
      for (; i + N <= n; i += N) hn::StoreU(hn::Mul(hn::Mul(hn::LoadU(d, row + i), vinv), hn::LoadU(d, scale + i)), d, out + i);
      for (; i < n; ++i) out[i] = row[i] * inv * scale[i];
      if (silu) simd::unary_f32(simd::UnaryF32::kSilu, y + r * n, y + r * n, size_t(n), {.alpha = 1.0f});
    });
    return;
  }
  const int64_t chunks = (inner + kColumnChunk - 1) / kColumnChunk;
  parallel_for(outer * chunks, outer * n * inner >= kParallelMinElements, [&](int64_t t) {
    const int64_t o = t / chunks, j = (t % chunks) * kColumnChunk, len = std::min(kColumnChunk, inner - j);
    HWY_ALIGN float inv[kColumnChunk];
    std::fill_n(inv, len, 0.0f);
    const float* in = x + o * n * inner + j;
    float* out = y + o * n * inner + j;
    for (int64_t c = 0; c < n; ++c)
      Accumulate(inv, in + c * inner, len, [](V a, V v) { return hn::MulAdd(v, v, a); },
                 [](float a, float v) { return a + v * v; });
    const V vn = hn::Set(d, 1.0f / float(n)), veps = hn::Set(d, eps);
    int64_t i = 0;
    for (; i + N <= len; i += N)
      hn::Store(hn::Div(hn::Set(d, 1.0f), hn::Sqrt(hn::MulAdd(hn::Load(d, inv + i), vn, veps))), d, inv + i);
    for (; i < len; ++i) inv[i] = 1.0f / std::sqrt(inv[i] / float(n) + eps);
    for (int64_t c = 0; c < n; ++c) {
      const V s = hn::Set(d, scale[c]);
      int64_t k = 0;
      for (; k + N <= len; k += N)
        hn::StoreU(hn::Mul(hn::Mul(hn::LoadU(d, in + c * inner + k), hn::Load(d, inv + k)), s), d,
                   out + c * inner + k);
      for (; k < len; ++k) out[c * inner + k] = in[c * inner + k] * inv[k] * scale[c];
      if (silu) simd::unary_f32(simd::UnaryF32::kSilu, out + c * inner, out + c * inner, size_t(len), {.alpha = 1.0f});
    }
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
HWY_EXPORT(RmsNorm);

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
void layer_norm_rows(const float* x, float* y, int64_t rows, int64_t n, float eps, const RowAffine& affine,
                     float* mean, float* inv_std) {
  HWY_DYNAMIC_DISPATCH(LayerNormRows)(x, y, rows, n, eps, affine, mean, inv_std);
}
void instance_norm_rows(const float* x, float* y, int64_t rows, int64_t n, int64_t channels,
                        float eps, const float* scale, const float* bias) {
  HWY_DYNAMIC_DISPATCH(InstanceNormRows)(x, y, rows, n, channels, eps, scale, bias);
}
void group_norm_rows(const float* x, float* y, int64_t rows, int64_t channels, int64_t spatial,
                     int64_t num_channels, float eps, const float* scale, const float* bias, bool silu) {
  HWY_DYNAMIC_DISPATCH(GroupNormRows)(x, y, rows, channels, spatial, num_channels, eps, scale, bias, silu);
}

void rms_norm(const float* x, float* y, int64_t outer, int64_t n, int64_t inner, float eps, const float* scale,
              bool silu) {
  HWY_DYNAMIC_DISPATCH(RmsNorm)(x, y, outer, n, inner, eps, scale, silu);
}

}  // namespace kiln::reduction_simd
#endif
