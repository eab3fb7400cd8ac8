// Winograd F(2x2, 3x3) convolutions (see winograd.h). The tile transforms
// are Highway loops compiled once per SIMD target (foreach_target.h
// re-includes this file), each vector holding a run of tiles along one row
// of tiles; the products are kiln's GEMM.
#include "kernels/cpu/winograd.h"

#include <omp.h>

#include <algorithm>
#include <type_traits>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/parallel.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/winograd.cc"
#include <hwy/foreach_target.h>  // must precede highway.h

#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace kiln::winograd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;
constexpr int64_t kLanes = int64_t(hn::MaxLanes(D()));

// A chunk of one image's tiles: [first, first + count) in row-major order
// over its tiles_h x tiles_w.
struct Chunk {
  int64_t first, count;
};

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

// v[xi] = (B^T d B)[xi], xi < 16, for the run of tiles from (th, tw) of
// input plane `in`; `row` holds a padded copy of an input row's reach.
HWY_INLINE void TransformTiles(const Conv& c, const float* in, int64_t th, int64_t tw, float* row, V* v) {
  const D d;
  // d[i][j]: input (2 th - pad_h + i, 2 tw' - pad_w + j) for the run's tiles tw'.
  V dij[4][4];
  const int64_t iw = 2 * tw - c.pad_w, reach = 2 * kLanes + 2;
  for (int64_t i = 0; i < 4; ++i) {
    const int64_t ih = 2 * th - c.pad_h + i;
    if (ih < 0 || ih >= c.height) {
      for (auto& value : dij[i]) value = hn::Zero(d);
      continue;
    }
    const float* line = in + ih * c.width;
    const float* from = line + iw;
    if (iw < 0 || iw + reach > c.width) {  // the row's edge within reach: a zero-padded copy
      for (int64_t j = 0; j < reach; ++j) row[j] = iw + j >= 0 && iw + j < c.width ? line[iw + j] : 0.0f;
      from = row;
    }
    hn::LoadInterleaved2(d, from, dij[i][0], dij[i][1]);
    hn::LoadInterleaved2(d, from + 2, dij[i][2], dij[i][3]);
  }
  // B^T d: rows combined; then (B^T d) B: columns.
  V r[4][4];
  for (int64_t j = 0; j < 4; ++j) {
    r[0][j] = hn::Sub(dij[0][j], dij[2][j]);
    r[1][j] = hn::Add(dij[1][j], dij[2][j]);
    r[2][j] = hn::Sub(dij[2][j], dij[1][j]);
    r[3][j] = hn::Sub(dij[1][j], dij[3][j]);
  }
  for (int64_t a = 0; a < 4; ++a) {
    v[a * 4 + 0] = hn::Sub(r[a][0], r[a][2]);
    v[a * 4 + 1] = hn::Add(r[a][1], r[a][2]);
    v[a * 4 + 2] = hn::Sub(r[a][2], r[a][1]);
    v[a * 4 + 3] = hn::Sub(r[a][1], r[a][3]);
  }
}

// v[xi * in_channels * stride + ic * stride + t] = (B^T d B)[xi] for the
// chunk's tiles t, from image x; columns [count, stride) zero.
void InputTransform(const Conv& c, int64_t first, int64_t count, const float* x, int64_t stride, float* v) {
  const D d;
  const Chunk chunk{first, count};
  const int64_t plane = c.height * c.width, xi_step = c.in_channels * stride;
  HWY_ALIGN float row[4 * kLanes + 4], part[kLanes];
  for (int64_t ic = 0; ic < c.in_channels; ++ic) {
    float* out = v + ic * stride;
    for (int64_t xi = 0; xi < 16; ++xi) std::fill(out + xi * xi_step + chunk.count, out + xi * xi_step + stride, 0.0f);
    ForEachRun(c, chunk, [&](int64_t th, int64_t tw, int64_t t, int64_t run) {
      V values[16];
      TransformTiles(c, x + ic * plane, th, tw, row, values);
      for (int64_t xi = 0; xi < 16; ++xi) {
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

// The same for bf16 products: each v[xi] a B operand packed as
// gemm::pack_bf16 packs (panels of 32 columns, input channels in pairs, an
// odd count's last paired with zeros), rounded to nearest even: as 32-bit
// words, channels (2 p, 2 p + 1) of tile t at xi * (depth / 2) * stride +
// t / 32 * (depth / 2) * 32 + p * 32 + t % 32, depth the channels rounded up
// to even. Columns [count, stride) zero.
void InputTransformBf16(const Conv& c, int64_t first, int64_t count, const float* x, int64_t stride,
                        uint32_t* v) {
  const hn::RebindToUnsigned<D> du;
  const Chunk chunk{first, count};
  const int64_t plane = c.height * c.width, pairs = (c.in_channels + 1) / 2, xi_step = pairs * stride;
  if (count < stride) std::fill(v, v + 16 * xi_step, 0u);
  HWY_ALIGN float row[4 * kLanes + 4];
  HWY_ALIGN uint32_t part[kLanes];
  // f32 to bf16 bits, to nearest even: the upper half of bits + 0x7FFF + (bit 16).
  auto rounded = [&](V value) {
    const auto bits = hn::BitCast(du, value);
    return hn::Add(bits, hn::Add(hn::Set(du, 0x7FFFu), hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1u))));
  };
  for (int64_t p = 0; p < pairs; ++p) {
    const bool odd = 2 * p + 1 < c.in_channels;  // the pair has its second channel
    ForEachRun(c, chunk, [&](int64_t th, int64_t tw, int64_t t, int64_t run) {
      V even[16], second[16];
      TransformTiles(c, x + 2 * p * plane, th, tw, row, even);
      if (odd) TransformTiles(c, x + (2 * p + 1) * plane, th, tw, row, second);
      for (int64_t xi = 0; xi < 16; ++xi) {
        const auto low = hn::ShiftRight<16>(rounded(even[xi]));
        const auto words =
            odd ? hn::Or(low, hn::And(rounded(second[xi]), hn::Set(du, 0xFFFF0000u))) : low;
        uint32_t* to = v + xi * xi_step + p * 32;
        if (run == kLanes && t % 32 + kLanes <= 32) {  // the run inside one panel
          hn::StoreU(words, du, to + t / 32 * pairs * 32 + t % 32);
          continue;
        }
        hn::Store(words, du, part);
        for (int64_t k = 0; k < run; ++k) to[(t + k) / 32 * pairs * 32 + (t + k) % 32] = part[k];
      }
    });
  }
}

// y's tiles of the chunk = A^T M A + bias (+ residual), from m[xi *
// out_channels * stride + oc * stride + t]; a tile's outputs past y's edge
// are dropped. y and residual point at the image.
void OutputTransform(const Conv& c, int64_t first, int64_t count, const float* m, int64_t stride,
                     const float* bias, const float* residual, float* y) {
  const D d;
  const Chunk chunk{first, count};
  const int64_t plane = c.out_height * c.out_width, xi_step = c.out_channels * stride;
  HWY_ALIGN float y0[2 * kLanes], y1[2 * kLanes];
  for (int64_t oc = 0; oc < c.out_channels; ++oc) {
    const V b = hn::Set(d, bias ? bias[oc] : 0.0f);
    ForEachRun(c, chunk, [&](int64_t th, int64_t tw, int64_t t, int64_t run) {
      const float* in = m + oc * stride + t;
      V s[4], u[4];  // A^T M: rows 0 + 1 + 2 and 1 - 2 - 3
      for (int64_t j = 0; j < 4; ++j) {
        const V m0 = hn::LoadU(d, in + j * xi_step), m1 = hn::LoadU(d, in + (4 + j) * xi_step);
        const V m2 = hn::LoadU(d, in + (8 + j) * xi_step), m3 = hn::LoadU(d, in + (12 + j) * xi_step);
        s[j] = hn::Add(hn::Add(m0, m1), m2);
        u[j] = hn::Sub(hn::Sub(m1, m2), m3);
      }
      // (A^T M) A, the bias added: outputs (2 th + a, 2 tw' + e).
      V out[2][2] = {{hn::Add(hn::Add(hn::Add(s[0], s[1]), s[2]), b), hn::Add(hn::Sub(hn::Sub(s[1], s[2]), s[3]), b)},
                     {hn::Add(hn::Add(hn::Add(u[0], u[1]), u[2]), b), hn::Add(hn::Sub(hn::Sub(u[1], u[2]), u[3]), b)}};
      const int64_t oh = 2 * th, ow = 2 * tw;
      const bool whole = run == kLanes && ow + 2 * kLanes <= c.out_width && oh + 1 < c.out_height;
      for (int64_t a = 0; a < 2 && oh + a < c.out_height; ++a) {
        float* to = y + oc * plane + (oh + a) * c.out_width + ow;
        const float* add = residual ? residual + oc * plane + (oh + a) * c.out_width + ow : nullptr;
        if (whole) {
          if (add) {
            V even, odd;
            hn::LoadInterleaved2(d, add, even, odd);
            out[a][0] = hn::Add(out[a][0], even);
            out[a][1] = hn::Add(out[a][1], odd);
          }
          hn::StoreInterleaved2(out[a][0], out[a][1], d, to);
          continue;
        }
        float* pair = a ? y1 : y0;
        hn::StoreInterleaved2(out[a][0], out[a][1], d, pair);
        const int64_t cols = std::min(2 * run, c.out_width - ow);
        for (int64_t e = 0; e < cols; ++e) to[e] = pair[e] + (add ? add[e] : 0.0f);
      }
    });
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace kiln::winograd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kiln::winograd {

HWY_EXPORT(InputTransform);
HWY_EXPORT(InputTransformBf16);
HWY_EXPORT(OutputTransform);

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

// A chunk's columns: kChunkTiles, or the image's tiles rounded up to whole
// GEMM panels (of every target: 32 columns) when there are fewer.
int64_t chunk_stride(const Conv& c) {
  return std::min(kChunkTiles, (c.tiles_h() * c.tiles_w() + 31) / 32 * 32);
}

// The scratch: the f32 GEMM's row offsets into V, then a slot per thread (V,
// M and the lanes M's last loads may read past it).
struct Layout {
  size_t rows_bytes, v_bytes, m_bytes, slot_bytes;
  Layout(const Conv& c, bool bf16) {
    const int64_t stride = chunk_stride(c);
    const size_t v_values = size_t(16 * (bf16 ? depth_of<kiln::bf16>(c) : c.in_channels) * stride);
    rows_bytes = aligned(size_t(c.in_channels) * sizeof(int64_t));
    v_bytes = aligned(v_values * (bf16 ? sizeof(kiln::bf16) : sizeof(float)));
    m_bytes = aligned(size_t(16 * c.out_channels * stride + 16) * sizeof(float));
    slot_bytes = v_bytes + m_bytes;
  }
};

// U[xi][oc][ic] = (G g G^T)[xi] for g = w[oc][ic], G = [1 0 0; 1/2 1/2 1/2;
// 1/2 -1/2 1/2; 0 0 1]; rows of depth_of<T>, rounded for bf16 (an odd
// count's pad column zero).
template <typename T>
void transform_filters_as(const Conv& c, const float* w, T* u, int threads) {
  const int64_t depth = depth_of<T>(c), matrix = c.out_channels * depth;
  auto store = [](float value) {
    if constexpr (kBf16<T>) return f32_to_bf16(value);
    else return value;
  };
  parallel_for(c.out_channels, threads > 1, [&](int64_t oc) {
    T* row = u + oc * depth;
    for (int64_t ic = 0; ic < c.in_channels; ++ic) {
      const float* g = w + (oc * c.in_channels + ic) * 9;
      float gg[4][3];  // G g
      for (int j = 0; j < 3; ++j) {
        gg[0][j] = g[j];
        gg[1][j] = 0.5f * (g[j] + g[3 + j] + g[6 + j]);
        gg[2][j] = 0.5f * (g[j] - g[3 + j] + g[6 + j]);
        gg[3][j] = g[6 + j];
      }
      for (int a = 0; a < 4; ++a) {
        row[(a * 4 + 0) * matrix + ic] = store(gg[a][0]);
        row[(a * 4 + 1) * matrix + ic] = store(0.5f * (gg[a][0] + gg[a][1] + gg[a][2]));
        row[(a * 4 + 2) * matrix + ic] = store(0.5f * (gg[a][0] - gg[a][1] + gg[a][2]));
        row[(a * 4 + 3) * matrix + ic] = store(gg[a][2]);
      }
    }
    for (int64_t xi = 0; xi < 16 && depth > c.in_channels; ++xi) row[xi * matrix + c.in_channels] = T{0};
  });
}

// The transforms around 16 GEMMs in T, a chunk of tiles per task.
template <typename T>
void convolve_as(const Conv& c, const float* x, const T* u, const float* bias, const float* residual, float* y,
                 void* scratch, int threads) {
  const Layout l(c, kBf16<T>);
  char* base = static_cast<char*>(scratch);
  auto* rows = reinterpret_cast<int64_t*>(base);
  char* slots = base + l.rows_bytes;
  const int64_t stride = chunk_stride(c), tiles = c.tiles_h() * c.tiles_w(), depth = depth_of<T>(c);
  const int64_t chunks = (tiles + stride - 1) / stride;
  if constexpr (!kBf16<T>)
    for (int64_t ic = 0; ic < c.in_channels; ++ic) rows[ic] = ic * stride;  // V's rows, one per input channel
  const int64_t in_plane = c.in_channels * c.height * c.width, out_plane = c.out_channels * c.out_height * c.out_width;
  const bool parallel = threads > 1 && c.batch * chunks > 1;
  parallel_for(c.batch * chunks, parallel, [&](int64_t task) {
    const int64_t image = task / chunks, first = task % chunks * stride, count = std::min(stride, tiles - first);
    char* slot = slots + size_t(parallel ? omp_get_thread_num() : 0) * l.slot_bytes;
    T* v = reinterpret_cast<T*>(slot);
    float* m = reinterpret_cast<float*>(slot + l.v_bytes);
    const float* image_x = x + image * in_plane;
    if constexpr (kBf16<T>)
      HWY_DYNAMIC_DISPATCH(InputTransformBf16)(c, first, count, image_x, stride, reinterpret_cast<uint32_t*>(v));
    else
      HWY_DYNAMIC_DISPATCH(InputTransform)(c, first, count, image_x, stride, v);
    for (int64_t xi = 0; xi < 16; ++xi) {
      const gemm::Product<T> p{c.out_channels, stride, depth, u + xi * c.out_channels * depth, depth,
                               v + xi * depth * stride, m + xi * c.out_channels * stride, stride,
                               kBf16<T> ? nullptr : rows};  // bf16 V is packed; f32 V is rows
      gemm::block(p, {});
    }
    HWY_DYNAMIC_DISPATCH(OutputTransform)(c, first, count, m, stride, bias,
                                          residual ? residual + image * out_plane : nullptr, y + image * out_plane);
  });
}

}  // namespace

bool pays_off(const Conv& c, bool filters_kept) {
  // kiln_bench_conv, direct against Winograd with the filters kept: SD's
  // UNet at 16x16 (batch 2, 128 tiles) 1.65-1.78x as fast, at 8x8 (32 tiles,
  // half of each 32-column GEMM panel empty) 0.83-0.92x. Transforming the
  // filters on every call made 256 tiles of 512 channels break even (1.01x).
  const int64_t tiles = c.batch * c.tiles_h() * c.tiles_w();
  return c.in_channels >= 32 && c.out_channels >= 32 && tiles >= (filters_kept ? 128 : 512);
}

size_t filter_count(const Conv& c, bool bf16) {
  return size_t(16 * c.out_channels * (bf16 ? depth_of<kiln::bf16>(c) : c.in_channels));
}
void transform_filters(const Conv& c, const float* w, float* u, int threads) { transform_filters_as(c, w, u, threads); }
void transform_filters(const Conv& c, const float* w, bf16* u, int threads) { transform_filters_as(c, w, u, threads); }

size_t scratch_bytes(const Conv& c, int threads, bool bf16) {
  const Layout l(c, bf16);
  return l.rows_bytes + size_t(threads) * l.slot_bytes;
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
