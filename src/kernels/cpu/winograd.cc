// Winograd F(2x2, 3x3) and F(4x4, 3x3) convolutions (see winograd.h). The tile transforms
// are Highway loops compiled once per SIMD target (foreach_target.h
// re-includes this file), each vector holding a run of tiles along one row
// of tiles; the products are kiln's GEMM.
#include "kernels/cpu/winograd.h"

#include <omp.h>

#include <algorithm>
#include <type_traits>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd_targets.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/winograd.cc"
#include <hwy/foreach_target.h>  // must precede highway.h

#include <hwy/highway.h>

#include "kernels/cpu/bf16_round-inl.h"

#ifndef KILN_WINOGRAD_CHUNK  // once, not per target
#define KILN_WINOGRAD_CHUNK
namespace kiln::winograd {
// A chunk of one image's tiles: [first, first + count) in row-major order
// over its tiles_h x tiles_w, its tile t at column `column + t` of V and M
// (which may hold other images' tiles beside it). The input transform of
// the chunk's `last` part zeroes V's columns after it.
struct Chunk {
  int64_t first, count, column;
  bool last;
};
}  // namespace kiln::winograd
#endif

HWY_BEFORE_NAMESPACE();
namespace kiln::winograd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;
using simd::HWY_NAMESPACE::StoreBf16;
constexpr int64_t kLanes = int64_t(hn::MaxLanes(D()));

// Calls fn(th, tw, t, run) for each run of up to kLanes tiles of the chunk
// in one row of tiles: tile (th, tw) is the run's first, t its index in the
// chunk, run its length.
template <class Fn>
HWY_INLINE void ForEachRun(const Conv& c, const Chunk& chunk, Fn&& fn) {
  const int64_t tiles_w = c.tiles_w();
  for (int64_t t = 0; t < chunk.count;) {
    const int64_t th = (chunk.first + t) / tiles_w, tw = (chunk.first + t) % tiles_w;
    const int64_t run = std::min({kLanes, tiles_w - tw, chunk.count - t});
    fn(th, tw, t, run);
    t += run;
  }
}

// B^T x: one column (or row) x of an input block, a = m + 2 values.
template <int64_t kM>
HWY_INLINE void InputSums(const V* x, V* r) {
  if constexpr (kM == 2) {  // B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]
    r[0] = hn::Sub(x[0], x[2]);
    r[1] = hn::Add(x[1], x[2]);
    r[2] = hn::Sub(x[2], x[1]);
    r[3] = hn::Sub(x[1], x[3]);
  } else {  // B^T of F(4x4, 3x3), at the points 0, +-1, +-2, infinity
    const D d;
    const V two = hn::Set(d, 2.0f), four = hn::Set(d, 4.0f), five = hn::Set(d, 5.0f);
    const V a = hn::NegMulAdd(four, x[2], x[4]), b = hn::NegMulAdd(four, x[1], x[3]);  // x4 - 4 x2, x3 - 4 x1
    const V c = hn::Sub(x[4], x[2]), e = hn::Sub(x[3], x[1]);
    r[0] = hn::MulAdd(four, x[0], hn::NegMulAdd(five, x[2], x[4]));  // 4 x0 - 5 x2 + x4
    r[1] = hn::Add(a, b);
    r[2] = hn::Sub(a, b);
    r[3] = hn::MulAdd(two, e, c);
    r[4] = hn::NegMulAdd(two, e, c);
    r[5] = hn::MulAdd(four, x[1], hn::NegMulAdd(five, x[3], x[5]));  // 4 x1 - 5 x3 + x5
  }
}

// A^T x: m outputs from one column (or row) x of a = m + 2 products.
template <int64_t kM>
HWY_INLINE void OutputSums(const V* x, V* o) {
  if constexpr (kM == 2) {  // A^T = [1 1 1 0; 0 1 -1 -1]
    o[0] = hn::Add(hn::Add(x[0], x[1]), x[2]);
    o[1] = hn::Sub(hn::Sub(x[1], x[2]), x[3]);
  } else {  // A^T = [1 1 1 1 1 0; 0 1 -1 2 -2 0; 0 1 1 4 4 0; 0 1 -1 8 -8 1]
    const D d;
    const V s = hn::Add(x[1], x[2]), t = hn::Sub(x[1], x[2]), p = hn::Add(x[3], x[4]), q = hn::Sub(x[3], x[4]);
    o[0] = hn::Add(hn::Add(x[0], s), p);
    o[1] = hn::MulAdd(hn::Set(d, 2.0f), q, t);
    o[2] = hn::MulAdd(hn::Set(d, 4.0f), p, s);
    o[3] = hn::Add(hn::MulAdd(hn::Set(d, 8.0f), q, t), x[5]);
  }
}

// v[xi] = (B^T d B)[xi], xi < a^2, for the run of tiles from (th, tw) of
// input plane `in`; `row` holds a padded copy of an input row's reach.
template <int64_t kM>
HWY_INLINE void TransformTiles(const Conv& c, const float* in, int64_t th, int64_t tw, float* row, V* v) {
  constexpr int64_t kA = kM + 2;
  const D d;
  // x[i][j]: input (m th - pad_h + i, m tw' - pad_w + j) for the run's tiles
  // tw', loaded de-interleaved: m values per lane, then the next m (of which
  // a - m = 2 are used).
  V x[kA][kA];
  const int64_t iw = kM * tw - c.pad_w, reach = kM * kLanes + kM;
  for (int64_t i = 0; i < kA; ++i) {
    const int64_t ih = kM * th - c.pad_h + i;
    if (ih < 0 || ih >= c.height) {
      for (auto& value : x[i]) value = hn::Zero(d);
      continue;
    }
    const float* line = in + ih * c.width;
    const float* from = line + iw;
    if (iw < 0 || iw + reach > c.width) {  // the row's edge within reach: a zero-padded copy
      for (int64_t j = 0; j < reach; ++j) row[j] = iw + j >= 0 && iw + j < c.width ? line[iw + j] : 0.0f;
      from = row;
    }
    if constexpr (kM == 2) {
      hn::LoadInterleaved2(d, from, x[i][0], x[i][1]);
      hn::LoadInterleaved2(d, from + 2, x[i][2], x[i][3]);
    } else {
      V unused0, unused1;
      hn::LoadInterleaved4(d, from, x[i][0], x[i][1], x[i][2], x[i][3]);
      hn::LoadInterleaved4(d, from + 4, x[i][4], x[i][5], unused0, unused1);
    }
  }
  // B^T d: columns; then (B^T d) B: rows.
  V column[kA], sums[kA], r[kA][kA];
  for (int64_t j = 0; j < kA; ++j) {
    for (int64_t i = 0; i < kA; ++i) column[i] = x[i][j];
    InputSums<kM>(column, sums);
    for (int64_t i = 0; i < kA; ++i) r[i][j] = sums[i];
  }
  for (int64_t i = 0; i < kA; ++i) InputSums<kM>(r[i], v + i * kA);
}

// v[xi * in_channels * stride + ic * stride + column + t] = (B^T d B)[xi]
// for the chunk's tiles t and input channels ic in [begin, end), from image
// x; for its last part, columns [column + count, stride) zero.
template <int64_t kM>
void InputTransformAs(const Conv& c, const Chunk& chunk, const float* x, int64_t stride, int64_t begin,
                      int64_t end, float* v) {
  const D d;
  const int64_t plane = c.height * c.width, xi_step = c.in_channels * stride, points = c.points();
  HWY_ALIGN float row[4 * kLanes + 4], part[kLanes];
  for (int64_t ic = begin; ic < end; ++ic) {
    float* out = v + ic * stride + chunk.column;
    for (int64_t xi = 0; xi < points && chunk.last; ++xi)
      std::fill(out + xi * xi_step + chunk.count, out + xi * xi_step + stride - chunk.column, 0.0f);
    ForEachRun(c, chunk, [&](int64_t th, int64_t tw, int64_t t, int64_t run) {
      V values[(kM + 2) * (kM + 2)];
      TransformTiles<kM>(c, x + ic * plane, th, tw, row, values);
      for (int64_t xi = 0; xi < points; ++xi) {
        float* to = out + xi * xi_step + t;
        if (run == kLanes) {
          hn::StoreU(values[xi], d, to);
        } else {
          hn::Store(values[xi], d, part);
          std::copy(part, part + run, to);
        }
      }
    });
  }
}

void InputTransform(const Conv& c, const Chunk& chunk, const float* x, int64_t stride, int64_t begin, int64_t end,
                    float* v) {
  if (c.tile == 4) return InputTransformAs<4>(c, chunk, x, stride, begin, end, v);
  InputTransformAs<2>(c, chunk, x, stride, begin, end, v);
}

// The same for bf16 products, pairs of input channels p in [begin, end):
// each v[xi] a B operand packed as gemm::pack_bf16 packs (panels of 32
// columns, input channels in pairs, an odd count's last paired with zeros),
// rounded to nearest even: as 32-bit words, channels (2 p, 2 p + 1) of
// column k at xi * (depth / 2) * stride + k / 32 * (depth / 2) * 32 + p * 32
// + k % 32, depth the channels rounded up to even.
template <int64_t kM>
void InputTransformBf16As(const Conv& c, const Chunk& chunk, const float* x, int64_t stride, int64_t begin,
                          int64_t end, uint32_t* v) {
  constexpr int64_t kPoints = (kM + 2) * (kM + 2);
  const hn::RebindToUnsigned<D> du;
  const int64_t plane = c.height * c.width, pairs = (c.in_channels + 1) / 2, xi_step = pairs * stride;
  auto at = [&](int64_t k) { return k / 32 * pairs * 32 + k % 32; };  // column k's word of pair 0
  for (int64_t xi = 0; xi < kPoints && chunk.last; ++xi)
    for (int64_t p = begin; p < end; ++p)
      for (int64_t k = chunk.column + chunk.count; k < stride; ++k) v[xi * xi_step + p * 32 + at(k)] = 0;
  HWY_ALIGN float row[4 * kLanes + 4];
  HWY_ALIGN uint32_t part[kLanes];
  // f32 to bf16 bits, to nearest even: the upper half of bits + 0x7FFF + (bit 16).
  auto rounded = [&](V value) {
    const auto bits = hn::BitCast(du, value);
    return hn::Add(bits, hn::Add(hn::Set(du, 0x7FFFu), hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1u))));
  };
  for (int64_t p = begin; p < end; ++p) {
    const bool odd = 2 * p + 1 < c.in_channels;  // the pair has its second channel
    ForEachRun(c, chunk, [&](int64_t th, int64_t tw, int64_t t, int64_t run) {
      V even[kPoints], second[kPoints];
      TransformTiles<kM>(c, x + 2 * p * plane, th, tw, row, even);
      if (odd) TransformTiles<kM>(c, x + (2 * p + 1) * plane, th, tw, row, second);
      for (int64_t xi = 0; xi < kPoints; ++xi) {
        const auto low = hn::ShiftRight<16>(rounded(even[xi]));
        const auto words =
            odd ? hn::Or(low, hn::And(rounded(second[xi]), hn::Set(du, 0xFFFF0000u))) : low;
        uint32_t* to = v + xi * xi_step + p * 32;
        const int64_t k = chunk.column + t;
        if (run == kLanes && k % 32 + kLanes <= 32) {  // the run inside one panel
          hn::StoreU(words, du, to + at(k));
          continue;
        }
        hn::Store(words, du, part);
        for (int64_t i = 0; i < run; ++i) to[at(k + i)] = part[i];
      }
    });
  }
}

void InputTransformBf16(const Conv& c, const Chunk& chunk, const float* x, int64_t stride, int64_t begin,
                        int64_t end, uint32_t* v) {
  if (c.tile == 4) return InputTransformBf16As<4>(c, chunk, x, stride, begin, end, v);
  InputTransformBf16As<2>(c, chunk, x, stride, begin, end, v);
}

// y's tiles of the chunk = A^T M A + bias (+ residual), output channels
// [begin, end), from m[xi * out_channels * stride + oc * stride + column +
// t]; a tile's outputs past y's edge are dropped. y and residual point at
// the image.
template <int64_t kM>
void OutputTransformAs(const Conv& c, const Chunk& chunk, const float* m, int64_t stride, int64_t begin,
                       int64_t end, const float* bias, const float* residual, float* y) {
  constexpr int64_t kA = kM + 2;
  const D d;
  const int64_t plane = c.out_height * c.out_width, xi_step = c.out_channels * stride;
  HWY_ALIGN float part[kM * kLanes];
  for (int64_t oc = begin; oc < end; ++oc) {
    const V b = hn::Set(d, bias ? bias[oc] : 0.0f);
    ForEachRun(c, chunk, [&](int64_t th, int64_t tw, int64_t t, int64_t run) {
      const float* in = m + oc * stride + chunk.column + t;
      V column[kA], sums[kM], rows[kM][kA];  // A^T M
      for (int64_t j = 0; j < kA; ++j) {
        for (int64_t i = 0; i < kA; ++i) column[i] = hn::LoadU(d, in + (i * kA + j) * xi_step);
        OutputSums<kM>(column, sums);
        for (int64_t i = 0; i < kM; ++i) rows[i][j] = sums[i];
      }
      const int64_t oh = kM * th, ow = kM * tw;
      const bool whole = run == kLanes && ow + kM * kLanes <= c.out_width && oh + kM <= c.out_height;
      for (int64_t i = 0; i < kM && oh + i < c.out_height; ++i) {
        V out[kM];  // (A^T M) A + bias: outputs (m th + i, m tw' + e)
        OutputSums<kM>(rows[i], out);
        float* to = y + oc * plane + (oh + i) * c.out_width + ow;
        const float* add = residual ? residual + oc * plane + (oh + i) * c.out_width + ow : nullptr;
        for (V& value : out) value = hn::Add(value, b);
        if (whole && add) {
          V more[kM];
          if constexpr (kM == 2) hn::LoadInterleaved2(d, add, more[0], more[1]);
          else hn::LoadInterleaved4(d, add, more[0], more[1], more[2], more[3]);
          for (int64_t e = 0; e < kM; ++e) out[e] = hn::Add(out[e], more[e]);
        }
        float* into = whole ? to : part;
        if constexpr (kM == 2) hn::StoreInterleaved2(out[0], out[1], d, into);
        else hn::StoreInterleaved4(out[0], out[1], out[2], out[3], d, into);
        if (whole) continue;
        const int64_t cols = std::min(kM * run, c.out_width - ow);
        for (int64_t e = 0; e < cols; ++e) to[e] = part[e] + (add ? add[e] : 0.0f);
      }
    });
  }
}

void OutputTransform(const Conv& c, const Chunk& chunk, const float* m, int64_t stride, int64_t begin, int64_t end,
                     const float* bias, const float* residual, float* y) {
  if (c.tile == 4) return OutputTransformAs<4>(c, chunk, m, stride, begin, end, bias, residual, y);
  OutputTransformAs<2>(c, chunk, m, stride, begin, end, bias, residual, y);
}

// G g: one column (or row) g of 3 filter values to a = m + 2.
template <int64_t kM>
HWY_INLINE void FilterSums(const V* g, V* out) {
  const D d;
  if constexpr (kM == 2) {  // G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1]
    const V half = hn::Set(d, 0.5f), outer = hn::Add(g[0], g[2]);
    out[0] = g[0];
    out[1] = hn::Mul(half, hn::Add(outer, g[1]));
    out[2] = hn::Mul(half, hn::Sub(outer, g[1]));
    out[3] = g[2];
  } else {  // G = [1/4 0 0; -1/6 -1/6 -1/6; -1/6 1/6 -1/6; 1/24 1/12 1/6; 1/24 -1/12 1/6; 0 0 1]
    const V outer = hn::Add(g[0], hn::Mul(hn::Set(d, 4.0f), g[2])), two = hn::Add(g[1], g[1]);
    const V sixth = hn::Set(d, -1.0f / 6.0f), twenty_fourth = hn::Set(d, 1.0f / 24.0f);
    out[0] = hn::Mul(hn::Set(d, 0.25f), g[0]);
    out[1] = hn::Mul(sixth, hn::Add(hn::Add(g[0], g[2]), g[1]));
    out[2] = hn::Mul(sixth, hn::Sub(hn::Add(g[0], g[2]), g[1]));
    out[3] = hn::Mul(twenty_fourth, hn::Add(outer, two));
    out[4] = hn::Mul(twenty_fourth, hn::Sub(outer, two));
    out[5] = g[2];
  }
}

// u[xi * matrix + oc * depth + ic] = (G g G^T)[xi] for g = w[oc][ic] (w
// [OC][IC][3][3]), output channels [begin, end); f32, or rounded to bf16.
// Vectors along ic: each filter value gathered from kLanes filters 9 floats
// apart: several times as fast as a scalar loop writing each filter's a^2
// values to a^2 matrices (docs/performance.md#winograd). A plan does this
// once; an eager call with tiles enough for Winograd, each time.
template <int64_t kM, typename T>
void FilterTransformAs(const Conv& c, const float* w, int64_t begin, int64_t end, T* u, int64_t depth,
                       int64_t matrix) {
  constexpr int64_t kA = kM + 2;
  const D d;
  const hn::RebindToSigned<D> di;
  const auto nine = hn::Mul(hn::Iota(di, 0), hn::Set(di, 9));
  HWY_ALIGN float tail[9 * kLanes];
  HWY_ALIGN T part[kLanes];
  for (int64_t oc = begin; oc < end; ++oc)
    for (int64_t ic = 0; ic < c.in_channels; ic += kLanes) {
      const int64_t lanes = std::min(kLanes, c.in_channels - ic);
      const float* from = w + (oc * c.in_channels + ic) * 9;
      if (lanes < kLanes) {  // the row's last filters, then zeros
        std::fill(std::copy(from, from + lanes * 9, tail), tail + 9 * kLanes, 0.0f);
        from = tail;
      }
      V g[9], column[3], sums[kA], gg[kA][3];
      for (int64_t e = 0; e < 9; ++e) g[e] = hn::GatherIndex(d, from + e, nine);
      for (int64_t j = 0; j < 3; ++j) {  // G g: columns
        for (int64_t r = 0; r < 3; ++r) column[r] = g[r * 3 + j];
        FilterSums<kM>(column, sums);
        for (int64_t r = 0; r < kA; ++r) gg[r][j] = sums[r];
      }
      for (int64_t r = 0; r < kA; ++r) {  // (G g) G^T: rows
        FilterSums<kM>(gg[r], sums);
        for (int64_t j = 0; j < kA; ++j) {
          T* to = u + (r * kA + j) * matrix + oc * depth + ic;
          T* into = lanes == kLanes ? to : part;
          if constexpr (std::is_same_v<T, bf16>) StoreBf16(d, sums[j], into);
          else hn::StoreU(sums[j], d, into);
          if (lanes < kLanes) std::copy(part, part + lanes, to);
        }
      }
    }
}

void FilterTransform(const Conv& c, const float* w, int64_t begin, int64_t end, float* u, int64_t depth,
                     int64_t matrix) {
  if (c.tile == 4) return FilterTransformAs<4>(c, w, begin, end, u, depth, matrix);
  FilterTransformAs<2>(c, w, begin, end, u, depth, matrix);
}

void FilterTransformBf16(const Conv& c, const float* w, int64_t begin, int64_t end, bf16* u, int64_t depth,
                         int64_t matrix) {
  if (c.tile == 4) return FilterTransformAs<4>(c, w, begin, end, u, depth, matrix);
  FilterTransformAs<2>(c, w, begin, end, u, depth, matrix);
}

}  // namespace HWY_NAMESPACE
}  // namespace kiln::winograd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kiln::winograd {

HWY_EXPORT(InputTransform);
HWY_EXPORT(InputTransformBf16);
HWY_EXPORT(OutputTransform);
HWY_EXPORT(FilterTransform);
HWY_EXPORT(FilterTransformBf16);

namespace {

constexpr size_t kAlign = 64;
size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

template <typename T>
constexpr bool kBf16 = std::is_same_v<T, bf16>;

// The depth of the GEMMs (U's rows, V's columns): the input channels, for
// bf16 products rounded up to even.
template <typename T>
int64_t depth_of(const Conv& c) {
  return kBf16<T> ? gemm::bf16_depth(c.in_channels) : c.in_channels;
}

// How a call's tiles go through V and M: in chunks of up to kChunkTiles of
// all images' tiles (in whole GEMM panels: 32 columns on every target), so
// images of few tiles still fill the panels (SD's UNet at 8x8 is 16 tiles an
// image, 32 a call). With a chunk per thread or more, each task a chunk, on
// its thread's own V and M; with fewer, the chunks one by one, each
// transform split across threads by channels and the GEMMs by point.
struct Layout {
  int64_t stride, chunks;  // a chunk's columns, and how many
  bool by_phase;
  size_t rows_bytes, v_bytes, m_bytes, slot_bytes, slots;
  Layout(const Conv& c, int threads, bool bf16) {
    const int64_t tiles = c.batch * c.tiles_h() * c.tiles_w();
    stride = std::min(kChunkTiles, (tiles + 31) / 32 * 32);
    chunks = (tiles + stride - 1) / stride;
    by_phase = chunks < threads;
    // The scratch: the f32 GEMM's row offsets into V, then a slot (V, M and
    // the lanes M's last loads may read past it) per thread, or one.
    const size_t v_values = size_t(c.points() * (bf16 ? depth_of<kiln::bf16>(c) : c.in_channels) * stride);
    rows_bytes = aligned(size_t(c.in_channels) * sizeof(int64_t));
    v_bytes = aligned(v_values * (bf16 ? sizeof(kiln::bf16) : sizeof(float)));
    m_bytes = aligned(size_t(c.points() * c.out_channels * stride + 16) * sizeof(float));
    slot_bytes = thread_slot_bytes(v_bytes + m_bytes);
    slots = by_phase ? 1 : size_t(threads);
  }
};

// U[xi][oc][ic] = (G g G^T)[xi] for g = w[oc][ic]; rows of depth_of<T>,
// rounded for bf16 (an odd count's pad column zero).
template <typename T>
void transform_filters_as(const Conv& c, const float* w, T* u, int threads) {
  const int64_t depth = depth_of<T>(c), matrix = c.out_channels * depth;
  parallel_ranges(c.out_channels, threads > 1, [&](int64_t begin, int64_t end) {
    if constexpr (kBf16<T>) HWY_DYNAMIC_DISPATCH(FilterTransformBf16)(c, w, begin, end, u, depth, matrix);
    else HWY_DYNAMIC_DISPATCH(FilterTransform)(c, w, begin, end, u, depth, matrix);
    for (int64_t xi = 0; xi < c.points() && depth > c.in_channels; ++xi)
      for (int64_t oc = begin; oc < end; ++oc) u[xi * matrix + oc * depth + c.in_channels] = T{0};
  });
}

// The transforms around a^2 GEMMs in T, chunk by chunk (Layout).
template <typename T>
void convolve_as(const Conv& c, const float* x, const T* u, const float* bias, const float* residual, float* y,
                 void* scratch, int threads) {
  const Layout l(c, threads, kBf16<T>);
  char* base = static_cast<char*>(scratch);
  auto* rows = reinterpret_cast<int64_t*>(base);
  char* slots = base + l.rows_bytes;
  const int64_t stride = l.stride, tiles = c.tiles_h() * c.tiles_w(), depth = depth_of<T>(c);
  if constexpr (!kBf16<T>)
    for (int64_t ic = 0; ic < c.in_channels; ++ic) rows[ic] = ic * stride;  // V's rows, one per input channel
  const int64_t in_plane = c.in_channels * c.height * c.width, out_plane = c.out_channels * c.out_height * c.out_width;
  const int64_t channels = kBf16<T> ? depth / 2 : c.in_channels;  // V's rows: channels, or pairs of them
  // fn(image, part) for each image's part of chunk k, in column order.
  auto for_each_image = [&](int64_t k, auto&& fn) {
    const int64_t begin = k * stride, end = std::min(begin + stride, c.batch * tiles);
    for (int64_t at = begin; at < end;) {
      const int64_t image = at / tiles, first = at % tiles, count = std::min(tiles - first, end - at);
      fn(image, Chunk{first, count, at - begin, at + count == end});
      at += count;
    }
  };
  // Chunk k's input channels [begin, end) into v.
  auto transform_inputs = [&](int64_t k, int64_t begin, int64_t end, T* v) {
    for_each_image(k, [&](int64_t image, const Chunk& part) {
      if constexpr (kBf16<T>)
        HWY_DYNAMIC_DISPATCH(InputTransformBf16)(c, part, x + image * in_plane, stride, begin, end,
                                                 reinterpret_cast<uint32_t*>(v));
      else
        HWY_DYNAMIC_DISPATCH(InputTransform)(c, part, x + image * in_plane, stride, begin, end, v);
    });
  };
  auto product = [&](const T* v, float* m, int64_t xi) {
    const gemm::Product<T> p{c.out_channels, stride, depth, u + xi * c.out_channels * depth, depth,
                             v + xi * depth * stride, m + xi * c.out_channels * stride, stride,
                             kBf16<T> ? nullptr : rows};  // bf16 V is packed; f32 V is rows
    gemm::block(p, {});
  };
  auto transform_outputs = [&](int64_t k, const float* m, int64_t begin, int64_t end) {
    for_each_image(k, [&](int64_t image, const Chunk& part) {
      HWY_DYNAMIC_DISPATCH(OutputTransform)(c, part, m, stride, begin, end, bias,
                                            residual ? residual + image * out_plane : nullptr, y + image * out_plane);
    });
  };
  if (l.by_phase) {
    T* v = reinterpret_cast<T*>(slots);
    float* m = reinterpret_cast<float*>(slots + l.v_bytes);
    const bool parallel = threads > 1;
    for (int64_t k = 0; k < l.chunks; ++k) {
      parallel_ranges(channels, parallel, [&](int64_t begin, int64_t end) { transform_inputs(k, begin, end, v); });
      parallel_for<Schedule::kDynamic>(c.points(), parallel, [&](int64_t xi) { product(v, m, xi); });
      parallel_ranges(c.out_channels, parallel,
                      [&](int64_t begin, int64_t end) { transform_outputs(k, m, begin, end); });
    }
    return;
  }
  parallel_for<Schedule::kDynamic>(l.chunks, threads > 1, [&](int64_t k) {
    char* slot = slots + size_t(threads > 1 ? omp_get_thread_num() : 0) * l.slot_bytes;
    T* v = reinterpret_cast<T*>(slot);
    float* m = reinterpret_cast<float*>(slot + l.v_bytes);
    transform_inputs(k, 0, channels, v);
    for (int64_t xi = 0; xi < c.points(); ++xi) product(v, m, xi);
    transform_outputs(k, m, 0, c.out_channels);
  });
}

}  // namespace

int64_t best_tile(const Conv& c, bool filters_kept, bool bf16) {
  if (c.in_channels < 32 || c.out_channels < 32) return 0;
  Conv two = c;
  two.tile = 2;
  const int64_t tiles_2 = c.batch * two.tiles_h() * two.tiles_w();
  // Time (kiln_bench_conv; measurements: docs/performance.md#winograd).
  // Eager, transforming the filters on every call: 256 tiles of 2x2 (512
  // channels) only break even with the direct conv, and F(4x4, 3x3)'s 2.25x
  // larger U made SD's VAE decoder slower than F(2x2, 3x3). Filters kept:
  // F(2x2, 3x3) beats direct from one full GEMM panel of tiles (SD's UNet at
  // 8x8, batch 2: 32 tiles); with 16 tiles or fewer, panels are half empty.
  // F(4x4, 3x3) beats F(2x2, 3x3) on the VAE decoder (one image, 64-4096
  // tiles of 4x4) and on the UNet at 32x32 and 16x16 (32 tiles).
  if (!filters_kept) return tiles_2 >= 512 ? 2 : 0;
  if (tiles_2 < 32) return 0;
  // Memory: a plan keeps U in place of the f32 weight, a^2 values for its 9.
  // Where U is larger (f32: 16/9 and 4x the weight; bf16 F(2x2, 3x3) is
  // smaller), each extra byte kept must save at least 32 multiplications a
  // call (per output, 9 direct, 4 F(2x2, 3x3), 2.25 F(4x4, 3x3)). Set
  // between the VAE decoder's 512 channels at 32x32 by F(4x4, 3x3) (22 a
  // byte: with them its peak memory passed ONNX Runtime's,
  // docs/performance.md#winograd) and the UNet's at 32x32 (45); the UNet's
  // 8x8 level in f32 (23 a byte) would add 358 MB, past ONNX Runtime's too.
  //
  // Tried and dropped there: U made on each call from the f32 weight, a
  // cache-sized block at a time (32-128 output by 64-256 input channels),
  // never whole: no faster than the direct conv, since streaming the weight
  // through the transform alone costs about what a kept U saves
  // (docs/performance.md#winograd).
  const double outputs = double(c.batch * c.out_height * c.out_width);
  auto worth = [&](double extra_bytes, double saved_each_output) {  // a filter's extra bytes
    return extra_bytes <= 0 || saved_each_output * outputs >= 32 * extra_bytes;
  };
  // (F(4x4, 3x3)'s 1,463 outputs or more are 92 tiles of 4x4 or more: its
  // panels are full where it passes.)
  if (!bf16 && worth((36 - 16) * 4, 4 - 2.25)) return 4;  // beyond F(2x2, 3x3)'s U
  return worth(16 * (bf16 ? 2 : 4) - 9 * 4, 9 - 4) ? 2 : 0;                // beyond the f32 weight
}

size_t filter_count(const Conv& c, bool bf16) {
  return size_t(c.points() * c.out_channels * (bf16 ? depth_of<kiln::bf16>(c) : c.in_channels));
}
void transform_filters(const Conv& c, const float* w, float* u, int threads) { transform_filters_as(c, w, u, threads); }
void transform_filters(const Conv& c, const float* w, bf16* u, int threads) { transform_filters_as(c, w, u, threads); }

size_t scratch_bytes(const Conv& c, int threads, bool bf16) {
  const Layout l(c, threads, bf16);
  return l.rows_bytes + l.slots * l.slot_bytes;
}

void convolve(const Conv& c, const float* x, const float* u, const float* bias, const float* residual, float* y,
              void* scratch, int threads) {
  convolve_as(c, x, u, bias, residual, y, scratch, threads);
}
void convolve(const Conv& c, const float* x, const bf16* u, const float* bias, const float* residual, float* y,
              void* scratch, int threads) {
  convolve_as(c, x, u, bias, residual, y, scratch, threads);
}

}  // namespace kiln::winograd
#endif  // HWY_ONCE
