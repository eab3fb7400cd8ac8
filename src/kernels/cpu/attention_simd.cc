// Highway per-target loops behind kernels/cpu/attention_simd.h. This file is
// compiled once per SIMD target (foreach_target.h re-includes it).
//
// A task is kRows query rows of one batch entry, held as a pair of vectors
// with one row per lane, so every step below works on whole vectors:
//   qt[t] = q[rows, t] * scale                          packed once, t < D
//   st[j] = sum over t of qt[t] * k[t, j]               a block of kKeyBlock keys
//   st[j] = exp(st[j] - max)                            running max raised first
//   ot[e] = ot[e] * exp(old max - max) + sum over j of st[j] * v[j, e]   (the
//           rescale on the way into the product's sums; none in the first block)
// and at the end y[rows, e] = ot[e] / (running sum of exps). Both products
// are one tile routine (TileProduct): kRows-float columns times scalars
// broadcast from k or v through their strides, so any perm of K and V runs
// the same vector code and neither is ever copied.
//
// Tried and dropped (measurements: docs/performance.md#f32-attention): P·V
// the other way round, as a GEMM's tile (scores broadcast, V's rows loaded,
// the output row-major so that y's rows are plain stores, not gathers): a
// little faster at 64 dims, but much slower at 72, whose rows of V fill 4.5
// vectors where the query rows always fill whole ones. Without the exps
// altogether (an upper bound on what a cheaper exp could give), the gain
// was too small to chase.
#include "kernels/cpu/attention_simd.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <climits>
#include <limits>

#include "core/dtype.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd_targets.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/attention_simd.cc"
#include <hwy/foreach_target.h>  // must precede highway.h

#include <hwy/highway.h>

#include "kernels/cpu/bf16_round-inl.h"
#include "kernels/cpu/transpose-inl.h"
#include "kernels/cpu/unary_ops-inl.h"

HWY_BEFORE_NAMESPACE();
namespace kiln::attention_simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using simd::HWY_NAMESPACE::ExpNonPositive;
using simd::HWY_NAMESPACE::StoreBf16;
#if KILN_TRANSPOSE16
using simd::HWY_NAMESPACE::Transpose16;
#endif

using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;
constexpr int64_t kLanes = int64_t(hn::MaxLanes(D()));
constexpr int64_t kRows = 2 * kLanes;
static_assert(kRows <= kMaxRows, "scratch_floats sizes tiles for kMaxRows rows");
// Tile columns per pass: 2 * kTileCols accumulators, plus the column pair
// and a broadcast, must fit the register file (32 vectors with AVX-512, else 16).
// (12 columns, in key blocks of 48 or 96, ran no faster in
// kiln_bench_attention.)
constexpr int kTileCols = HWY_TARGET <= HWY_AVX3 ? 8 : 4;
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// c[j] = (kAccumulate ? c[j] * scale : 0) + sum over t < n of a[t] * b[t * b_step + j * b_col]
// for j < kCols, each a[t] and c[j] a column of kRows floats, scale one
// factor per row (its two vectors).
template <int kCols, bool kAccumulate>
HWY_INLINE void TileUpdate(const float* HWY_RESTRICT a, int64_t n, const float* b, int64_t b_step,
                           int64_t b_col, const V* scale, float* HWY_RESTRICT c) {
  const D d;
  V lo[kCols], hi[kCols];
  for (int j = 0; j < kCols; ++j) {
    lo[j] = kAccumulate ? hn::Mul(hn::Load(d, c + j * kRows), scale[0]) : hn::Zero(d);
    hi[j] = kAccumulate ? hn::Mul(hn::Load(d, c + j * kRows + kLanes), scale[1]) : hn::Zero(d);
  }
  for (int64_t t = 0; t < n; ++t, a += kRows, b += b_step) {
    const V a_lo = hn::Load(d, a), a_hi = hn::Load(d, a + kLanes);
    for (int j = 0; j < kCols; ++j) {
      const V bj = hn::Set(d, b[j * b_col]);
      lo[j] = hn::MulAdd(a_lo, bj, lo[j]);
      hi[j] = hn::MulAdd(a_hi, bj, hi[j]);
    }
  }
  for (int j = 0; j < kCols; ++j) {
    hn::Store(lo[j], d, c + j * kRows);
    hn::Store(hi[j], d, c + j * kRows + kLanes);
  }
}

// TileUpdate over `cols` columns.
template <bool kAccumulate>
void TileProduct(const float* a, int64_t n, const float* b, int64_t b_step, int64_t b_col, int64_t cols,
                 const V* scale, float* c) {
  int64_t j = 0;
  for (; j + kTileCols <= cols; j += kTileCols)
    TileUpdate<kTileCols, kAccumulate>(a, n, b + j * b_col, b_step, b_col, scale, c + j * kRows);
  for (; j < cols; ++j) TileUpdate<1, kAccumulate>(a, n, b + j * b_col, b_step, b_col, scale, c + j * kRows);
}

// With 512-bit vectors, Q's rows turn around 16 x 16 at a time in registers
// (Transpose16), which shrinks PackQueries' share where Q's rows lie far
// apart (dit_small's, 384 floats: docs/performance.md#f32-attention).
// qt[t][r] = q[r, t] * scale for the task's rows; zero in the lanes past them.
// With 512-bit vectors and rows of Q contiguous, 16 columns at a time by
// Transpose16; otherwise whole tasks (whose offsets fit the gather's 32-bit
// indices) go a column of Q per pair of gathers, the rest element by element.
void PackQueries(const float* q, int64_t row_step, int64_t col_step, int64_t rows, int64_t cols, float scale,
                 float* qt) {
  int64_t t = 0;
#if KILN_TRANSPOSE16
  if (col_step == 1) {
    const __m512 vscale = _mm512_set1_ps(scale);
    for (; t + 16 <= cols; t += 16)
      for (int64_t h = 0; h < kRows; h += 16) {
        __m512 r[16];
        for (int64_t i = 0; i < 16; ++i)
          r[i] = h + i < rows ? _mm512_loadu_ps(q + (h + i) * row_step + t) : _mm512_setzero_ps();
        Transpose16(r);
        for (int64_t j = 0; j < 16; ++j) _mm512_store_ps(qt + (t + j) * kRows + h, _mm512_mul_ps(r[j], vscale));
      }
  }
#endif
  if (rows == kRows && row_step * kRows <= INT32_MAX) {
    const D d;
    const hn::RebindToSigned<D> di;
    const auto lo = hn::Mul(hn::Iota(di, 0), hn::Set(di, int32_t(row_step)));
    const auto hi = hn::Add(lo, hn::Set(di, int32_t(kLanes * row_step)));
    const V vscale = hn::Set(d, scale);
    for (; t < cols; ++t) {
      const float* column = q + t * col_step;
      hn::Store(hn::Mul(hn::GatherIndex(d, column, lo), vscale), d, qt + t * kRows);
      hn::Store(hn::Mul(hn::GatherIndex(d, column, hi), vscale), d, qt + t * kRows + kLanes);
    }
    return;
  }
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t u = t; u < cols; ++u) qt[u * kRows + r] = r < rows ? q[r * row_step + u * col_step] * scale : 0.0f;
}

void AddMask(const float* mask, int64_t row_step, int64_t col_step, int64_t rows, int64_t keys, float* st) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < keys; ++j) st[j * kRows + r] += mask[r * row_step + j * col_step];
}

// Per row (lane): the largest score so far, the sum of exp(score - it), and
// exp(previous largest - it), the factor the output sums so far are scaled by.
struct Running {
  V max[2], sum[2], alpha[2];
};

// The larger of `max` and `count` vectors of scores, s + j * step for j <
// count, per lane; NaN where any is NaN (Max alone may drop it), which the
// callers turn into a NaN row. A separate NaN flag keeps Max's latency chain,
// the loop's bottleneck, short.
HWY_INLINE V BlockMax(const float* s, int64_t count, int64_t step, V max) {
  const D d;
  auto nan = hn::IsNaN(max);
  for (int64_t j = 0; j < count; ++j) {
    const V x = hn::LoadU(d, s + j * step);
    max = hn::Max(max, x);
    nan = hn::Or(nan, hn::IsNaN(x));
  }
  return hn::IfThenElse(nan, hn::Set(d, kNaN), max);
}

// Raises the running max over a block of scores, turns the scores into
// exp(score - max), and rescales the sum to the new max (the output sums are
// rescaled by run.alpha as P·V's product loads them).
void SoftmaxBlock(float* st, int64_t keys, Running& run) {
  const D d;
  for (int h = 0; h < 2; ++h) {
    float* s = st + h * kLanes;
    const V max = BlockMax(s, keys, kRows, run.max[h]);  // one vector per key
    // While every score of a row is -inf (masked), subtract 0 so exp gives 0, not NaN.
    const V shift = hn::IfThenZeroElse(hn::Eq(max, hn::Set(d, -kInf)), max);
    const V alpha = ExpNonPositive(d, hn::Sub(run.max[h], shift));
    V sum = hn::Zero(d);
    for (int64_t j = 0; j < keys; ++j) {
      const V e = ExpNonPositive(d, hn::Sub(hn::Load(d, s + j * kRows), shift));
      hn::Store(e, d, s + j * kRows);
      sum = hn::Add(sum, e);
    }
    run.sum[h] = hn::MulAdd(run.sum[h], alpha, sum);
    run.max[h] = max;
    run.alpha[h] = alpha;
  }
}

// y[r, e] = ot[e][r] / sum[r]. A row whose max is not finite (every score
// -inf, or a NaN or +inf among them) is NaN throughout, as softmax gives.
// Where y's rows are contiguous, kLanes of a row a gather. (Transpose16
// here instead gained nothing, docs/performance.md#f32-attention: its
// stores to y miss the cache either way.)
void WriteRows(const Running& run, const float* ot, int64_t rows, int64_t dv, float* y, int64_t row_step,
               int64_t col_step) {
  const D d;
  HWY_ALIGN float max[kRows], inv[kRows];
  for (int h = 0; h < 2; ++h) {
    hn::Store(run.max[h], d, max + h * kLanes);
    hn::Store(hn::Div(hn::Set(d, 1.0f), run.sum[h]), d, inv + h * kLanes);
  }
  const hn::RebindToSigned<D> di;
  const auto columns = hn::Mul(hn::Iota(di, 0), hn::Set(di, int32_t(kRows)));  // ot's stride along e
  const int64_t whole = col_step == 1 ? dv / kLanes * kLanes : 0;  // e read kLanes at once
  for (int64_t r = 0; r < rows; ++r) {
    const float scale = std::isfinite(max[r]) ? inv[r] : kNaN;
    float* row = y + r * row_step;
    for (int64_t e = 0; e < whole; e += kLanes)
      hn::StoreU(hn::Mul(hn::GatherIndex(d, ot + e * kRows + r, columns), hn::Set(d, scale)), d, row + e);
    for (int64_t e = whole; e < dv; ++e) row[e * col_step] = ot[e * kRows + r] * scale;
  }
}

// Rows [row0, row0 + kRows) of batch entry (b0, b1), over every key block.
void AttendRows(const Problem& p, int64_t b0, int64_t b1, int64_t row0, float* scratch) {
  const int64_t rows = std::min(kRows, p.sq - row0);
  float* qt = scratch;
  float* st = qt + p.d * kRows;
  float* ot = st + kKeyBlock * kRows;
  auto at = [&](auto* base, const Strides& s) { return base + b0 * s[0] + b1 * s[1]; };
  const float* k = at(p.k, p.k_stride);
  const float* v = at(p.v, p.v_stride);
  const float* mask = p.mask ? at(p.mask, p.mask_stride) + row0 * p.mask_stride[2] : nullptr;
  PackQueries(at(p.q, p.q_stride) + row0 * p.q_stride[2], p.q_stride[2], p.q_stride[3], rows, p.d, p.scale, qt);
  Running run;
  for (int h = 0; h < 2; ++h) {
    run.max[h] = hn::Set(D(), -kInf);
    run.sum[h] = hn::Zero(D());
  }
  for (int64_t key0 = 0; key0 < p.sk; key0 += kKeyBlock) {
    const int64_t keys = std::min(kKeyBlock, p.sk - key0);
    TileProduct<false>(qt, p.d, k + key0 * p.k_stride[3], p.k_stride[2], p.k_stride[3], keys, nullptr, st);
    if (mask) AddMask(mask + key0 * p.mask_stride[3], p.mask_stride[2], p.mask_stride[3], rows, keys, st);
    SoftmaxBlock(st, keys, run);
    const float* v_block = v + key0 * p.v_stride[2];
    if (key0 == 0)  // ot's first sums: nothing to load or rescale
      TileProduct<false>(st, keys, v_block, p.v_stride[2], p.v_stride[3], p.dv, nullptr, ot);
    else
      TileProduct<true>(st, keys, v_block, p.v_stride[2], p.v_stride[3], p.dv, run.alpha, ot);
  }
  WriteRows(run, ot, rows, p.dv, at(p.y, p.y_stride) + row0 * p.y_stride[2], p.y_stride[2], p.y_stride[3]);
}

// exp(x[j] - shift) for j < whole (whole vectors), rounded to bf16 into
// out; returns the f32 exps' sums, per lane.
HWY_INLINE V ExpsToBf16(D d, const float* x, int64_t whole, V shift, bf16* out) {
  V acc = hn::Zero(d);
  for (int64_t j = 0; j < whole; j += kLanes) {
    const V e = ExpNonPositive(d, hn::Sub(hn::LoadU(d, x + j), shift));
    StoreBf16(d, e, out + j);
    acc = hn::Add(acc, e);
  }
  return acc;
}

// The same with AVX512-BF16's conversion (vcvtneps2bf16: to nearest even,
// one instruction for StoreBf16's eight; denormals, which these exps never
// reach above 2^-126 anyway, go to 0) and an exp only as exact as bf16
// needs (ExpForBf16). Only on CPUs that have it, as
// gemm::has_bf16_products() tells, which is where bf16 attention runs.
#define KILN_NATIVE_BF16 (HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3)
#if KILN_NATIVE_BF16
#pragma GCC push_options
#pragma GCC target("avx512bf16")
// exp(x) for x <= 0 within a relative 7.9e-5 (2 % of bf16's half ulp,
// 2^-8; the sums of the exps, kept in f32, are as close; the fit's own
// 7.5e-5 plus t's rounding, checked against double exp at 4M points of
// [-87, 0], the fused multiply-adds taken as two roundings): 2^t, t = x
// log2(e), as 2^round(t) by vscalefps times a fit of 2^f on [-1/2, 1/2] of
// degree 3 (least squares of the relative error, weighted toward its
// peaks), 8 instructions where ExpNonPositive takes 16. x below -88, -inf
// among them, gives 0 or a denormal, which the conversion flushes. It made
// fused bf16 attention faster and left its error against f32 attention
// unchanged (measurements: docs/performance.md#bf16-attention).
HWY_INLINE __m512 ExpForBf16(__m512 x) {
  const __m512 t = _mm512_mul_ps(_mm512_max_ps(x, _mm512_set1_ps(-88.0f)), _mm512_set1_ps(1.44269504f));
  const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(t, n);
  __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(0.055171564f), f, _mm512_set1_ps(0.242610991f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.693260968f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.999928057f));
  return _mm512_scalef_ps(p, n);
}

V ExpsToBf16Native(D d, const float* x, int64_t whole, V shift, bf16* out) {
  V acc = hn::Zero(d);
  for (int64_t j = 0; j < whole; j += kLanes) {
    const V e{ExpForBf16(hn::Sub(hn::LoadU(d, x + j), shift).raw)};
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + j), (__m256i)_mm512_cvtneps_pbh(e.raw));
    acc = hn::Add(acc, e);
  }
  return acc;
}
#pragma GCC pop_options
#endif

void OnlineSoftmaxRows(float* s, int64_t rows, int64_t keys, int64_t lds, float* max, float* sum, float* alpha,
                       bf16* probabilities) {
  const D d;
  const int64_t whole = keys / kLanes * kLanes;
#if KILN_NATIVE_BF16
  const bool native = probabilities && gemm::has_bf16_products();
#endif
  for (int64_t r = 0; r < rows; ++r) {
    float* x = s + r * lds;
    bf16* out = probabilities ? probabilities + r * lds : nullptr;
    // MaxOfLanes may drop a NaN lane of BlockMax's, as Max does.
    const V lanes = BlockMax(x, whole / kLanes, kLanes, hn::Set(d, max[r]));
    float m = hn::AllFalse(d, hn::IsNaN(lanes)) ? hn::GetLane(hn::MaxOfLanes(d, lanes)) : kNaN;
    for (int64_t j = whole; j < keys; ++j) m = std::isnan(x[j]) || std::isnan(m) ? x[j] + m : std::max(m, x[j]);
    // While every score of a row is -inf (masked), subtract 0 so exp gives 0, not NaN.
    const float shift = m == -kInf ? 0.0f : m;
    const V vshift = hn::Set(d, shift);
    V acc = hn::Zero(d);
    if (out) {
#if KILN_NATIVE_BF16
      if (native)
        acc = ExpsToBf16Native(d, x, whole, vshift, out);
      else
#endif
        acc = ExpsToBf16(d, x, whole, vshift, out);
    } else {
      for (int64_t j = 0; j < whole; j += kLanes) {
        const V e = ExpNonPositive(d, hn::Sub(hn::LoadU(d, x + j), vshift));
        hn::StoreU(e, d, x + j);
        acc = hn::Add(acc, e);
      }
    }
    float total = hn::GetLane(hn::SumOfLanes(d, acc));
    for (int64_t j = whole; j < keys; ++j) {
      const float e = std::exp(x[j] - shift);
      if (out) out[j] = f32_to_bf16(e);
      else x[j] = e;
      total += e;
    }
    alpha[r] = std::exp(max[r] - shift);
    sum[r] = sum[r] * alpha[r] + total;
    max[r] = m;
  }
}

void AttentionF32(const Problem& p, float* scratch, bool parallel) {
  const int64_t blocks = (p.sq + kRows - 1) / kRows;
  const int64_t slot = scratch_floats(p);
  // Tasks in order of b0 (batch), then b1 (heads): each thread's contiguous
  // share is then a range of batch entries, the rows of Q, K and V that a
  // projection GEMM splitting rows first (a small weight, gemm.cc) left in
  // that thread's caches. Measured against heads first (which suits
  // projections that split their columns): docs/performance.md#f32-attention.
  // bf16 attention goes in this order too.
  parallel_shares(p.b0 * p.b1 * blocks, parallel, [&](int64_t task) {
    const int64_t batch = task / blocks;
    AttendRows(p, batch / p.b1, batch % p.b1, task % blocks * kRows,
               scratch + (parallel ? omp_get_thread_num() : 0) * slot);
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace kiln::attention_simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kiln::attention_simd {

HWY_EXPORT(AttentionF32);
HWY_EXPORT(OnlineSoftmaxRows);

void online_softmax_rows(float* s, int64_t rows, int64_t keys, int64_t lds, float* max, float* sum, float* alpha,
                         bf16* probabilities) {
  HWY_DYNAMIC_DISPATCH(OnlineSoftmaxRows)(s, rows, keys, lds, max, sum, alpha, probabilities);
}

void attention_f32(const Problem& p, float* scratch, bool parallel) {
  HWY_DYNAMIC_DISPATCH(AttentionF32)(p, scratch, parallel);
}

}  // namespace kiln::attention_simd
#endif
