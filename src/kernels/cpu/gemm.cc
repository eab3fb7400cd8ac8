// Highway per-target loops behind kernels/cpu/gemm.h. This file is compiled
// once per SIMD target (foreach_target.h re-includes it).
//
// block() walks C in tiles of kRows rows by one packed panel (two vectors).
// A tile's sums stay in registers for a whole slice of K: each step
// broadcasts one A value per row and multiplies it into both vectors of the
// panel's row, so a step is 2 * kRows fused multiply-adds for 2 + kRows
// loads. The tiles go in blocks of kBlockRows rows of A by one slice of at
// most kSliceDepth of K (442 KiB, which stays in L2), and each block passes
// over every panel before the next: A is read from memory once however many
// panels there are. A convolution's weight is such an A (1280 x 11520 floats,
// 59 MB, in an SD UNet), which without the blocks was read again for every
// panel of 32 pixels. The slices go inside the blocks: slices outside them
// would keep a slice of B in L2 across blocks, but lost on the smallest convs
// (measurements: docs/performance.md#gemm-blocks).
// Slices are long, as a pass loads and stores its tile's sums once: short
// slices, sized to keep a panel's slice in L1, lost to whole-K passes, and
// lengths from 768 to 2304 rows measured alike (docs/performance.md#gemm-blocks).
// A B larger than L2 (a DiT's MLP weight, 21 MB) comes from DRAM each time
// a block passes over it, and the block's first tile used to wait for each
// panel alone: its tiles now prefetch the next panel into L2 in equal shares,
// a line every few steps (measurements: docs/performance.md#gemm-prefetch).
// A B that starts cold costs the products less than the gap between a
// model's products and the same products timed alone, so that gap lies
// elsewhere (measurements: docs/performance.md#gemm-cold-b).
//
// bf16 products (TileBf16, AVX-512 targets with AVX512-BF16) use the same
// blocks and tiles, two of K's rows a step, and slices of as many bytes.
// They keep up with oneDNN's bf16 matmul where K is large and fall behind
// where it is small, for a cause not found: 6-row tiles over two panels
// (half the broadcasts a step) did not close the gap, and A's pairs as
// embedded broadcasts were slower (measurements: docs/performance.md#gemm-bf16).
#include "kernels/cpu/gemm.h"

#include <cpuid.h>
#include <omp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cassert>
#include <cstring>
#include <type_traits>
#include <utility>

#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd_targets.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/gemm.cc"
#include <hwy/foreach_target.h>  // must precede highway.h

#include <hwy/highway.h>

#include "kernels/cpu/bf16_round-inl.h"
#include "kernels/cpu/transpose-inl.h"
#include "kernels/cpu/unary_ops-inl.h"

HWY_BEFORE_NAMESPACE();
namespace kiln::gemm {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;
constexpr int64_t kLanes = int64_t(hn::MaxLanes(D()));
constexpr int64_t kPanel = 2 * kLanes;
// Rows per tile: 2 * kRows accumulators, the panel's pair and a broadcast
// must fit the register file (32 vectors with AVX-512, else 16).
constexpr int kRows = HWY_TARGET <= HWY_AVX3 ? 12 : 6;
constexpr int64_t kBlockRows = 96, kSliceDepth = 1152;  // see the top of the file
// AMX tiles' slices of K (bf16 values): a slice's end stores the tiles'
// sums to C and the next slice's start loads them again, which cost more
// than A's and B's slices held in L1 or L2 saved (docs/performance.md#gemm-amx).
constexpr int64_t kAmxSliceDepth = 4096;

// A tile's share of the next panel's slice, in bytes per row of K, when a
// block's tiles prefetch it in equal parts (see Pass); one line every
// kRowsPerLine rows.
template <typename T>
constexpr int64_t kNextBytesPerRow = std::max<int64_t>(1, kPanel * int64_t(sizeof(T)) * kRows / kBlockRows);
template <typename T>
constexpr int64_t kRowsPerLine = 64 / kNextBytesPerRow<T>;
// A block of fewer tiles (fewer than kBlockRows rows of A) would leave
// shares unclaimed, so its first kDensePrefetchers tiles prefetch a line
// after every step instead (a row of K, f32; two, bf16), together the whole
// panel. With only its tiles' shares prefetched, 3 of 8, SD's UNet's convs at
// 4x4 (its 32 rows of patches against a 59 MB weight) waited on DRAM: their
// time over the (untouched) 16x16 level's, in kiln profile, binaries
// alternated, went 0.80-0.85 -> 0.70-0.71 (f32) and 0.61-0.62 -> 0.53 (bf16).
template <typename T>
constexpr int64_t kDenseBytesPerRow = 64 / (4 / int64_t(sizeof(T)));
template <typename T>
constexpr int64_t kDensePrefetchers = (kPanel * int64_t(sizeof(T)) + kDenseBytesPerRow<T> - 1) / kDenseBytesPerRow<T>;

// How a tile prefetches the next panel: not at all, its equal share, or
// densely (above).
enum Prefetch : int { kNoPrefetch, kSharePrefetch, kDensePrefetch };

int64_t PanelWidth() { return kPanel; }

#if KILN_TRANSPOSE16
// Rows [t0, t0 + 16) of a whole panel whose columns lie along b's rows (row
// stride 1: a Linear's weight [N, K], read as B = Wᵀ), from b at (t0, the
// panel's first column): 16 columns' 16 floats turned around at a time.
void PackColumns(const float* b, int64_t col_stride, float scale, float* packed) {
  const __m512 vscale = _mm512_set1_ps(scale);
  for (int64_t h = 0; h < kPanel; h += 16) {
    __m512 r[16];
    for (int64_t i = 0; i < 16; ++i) r[i] = _mm512_mul_ps(_mm512_loadu_ps(b + (h + i) * col_stride), vscale);
    simd::HWY_NAMESPACE::Transpose16(r);
    for (int64_t t = 0; t < 16; ++t) _mm512_storeu_ps(packed + t * kPanel + h, r[t]);
  }
}
#endif

// Whole panels a vector at a time: rows of B contiguous (col_stride 1), or
// with 512-bit vectors, columns contiguous (PackColumns). Element by element,
// packing was a large share of a full-width SD UNet's start
// (docs/performance.md#gemm-packing).
void Pack(const float* b, int64_t row_stride, int64_t col_stride, int64_t k, int64_t n, float* packed,
          float scale) {
  const D d;
  const V vscale = hn::Set(d, scale);
  for (int64_t j0 = 0; j0 < n; j0 += kPanel) {
    const int64_t cols = std::min(kPanel, n - j0);
    int64_t t = 0;
#if KILN_TRANSPOSE16
    if (row_stride == 1 && col_stride != 1 && cols == kPanel)
      for (; t + 16 <= k; t += 16, packed += 16 * kPanel) PackColumns(b + t + j0 * col_stride, col_stride, scale, packed);
#endif
    for (; t < k; ++t, packed += kPanel) {
      const float* row = b + t * row_stride + j0 * col_stride;
      if (cols == kPanel && col_stride == 1) {
        for (int64_t j = 0; j < kPanel; j += kLanes) hn::StoreU(hn::Mul(hn::LoadU(d, row + j), vscale), d, packed + j);
        continue;
      }
      for (int64_t j = 0; j < cols; ++j) packed[j] = row[j * col_stride] * scale;
      std::fill(packed + cols, packed + kPanel, 0.0f);
    }
  }
}

// The start and end of a tile (below): its sums start at (load ? c : 0) +
// the bias, one per column (col_bias, kPanel floats) or one per row
// (row_bias), either may be null; they end stored to c.
// kHalf, the tile is the panel's first vector alone (hi unused): a last
// panel of at most kLanes columns (a bf16 attention's P·V at head dim 40 or
// 72 computed 32 columns for 8 without it).
template <int kTileRows, bool kHalf>
HWY_INLINE void StartSums(V* lo, V* hi, const float* c, int64_t ldc, bool load, const float* col_bias,
                          const float* row_bias) {
  const D d;
  const V bias_lo = col_bias ? hn::LoadU(d, col_bias) : hn::Zero(d);
  const V bias_hi = col_bias && !kHalf ? hn::LoadU(d, col_bias + kLanes) : hn::Zero(d);
  for (int r = 0; r < kTileRows; ++r) {
    const V row = row_bias ? hn::Set(d, row_bias[r]) : hn::Zero(d);
    lo[r] = hn::Add(load ? hn::LoadU(d, c + r * ldc) : hn::Zero(d), hn::Add(bias_lo, row));
    if (!kHalf) hi[r] = hn::Add(load ? hn::LoadU(d, c + r * ldc + kLanes) : hn::Zero(d), hn::Add(bias_hi, row));
  }
}
template <int kTileRows, bool kHalf>
HWY_INLINE void StoreSums(const V* lo, const V* hi, float* c, int64_t ldc) {
  for (int r = 0; r < kTileRows; ++r) {
    hn::StoreU(lo[r], D(), c + r * ldc);
    if (!kHalf) hn::StoreU(hi[r], D(), c + r * ldc + kLanes);
  }
}

// Asks for a cache line of the panel a pass reads next, into L2 (see Pass).
HWY_INLINE void PrefetchLine(const char* line) { __builtin_prefetch(line, 0, 2); }

// Step t of a tile (below): a[r, t] * b[t, :] added to row r's sums.
template <int kTileRows, bool kGathered, bool kHalf>
HWY_INLINE void Step(V* lo, V* hi, const float* HWY_RESTRICT a, int64_t lda, const float* HWY_RESTRICT b,
                     const int64_t* b_rows, int64_t t) {
  const D d;
  V b_lo, b_hi;
  if constexpr (kGathered) {
    const float* row = b + b_rows[t];
    b_lo = hn::LoadU(d, row), b_hi = hn::LoadU(d, row + kLanes);
  } else {
    b_lo = hn::Load(d, b + t * kPanel), b_hi = kHalf ? b_lo : hn::Load(d, b + t * kPanel + kLanes);
  }
  for (int r = 0; r < kTileRows; ++r) {
    const V ar = hn::Set(d, a[r * lda + t]);
    lo[r] = hn::MulAdd(ar, b_lo, lo[r]);
    if (!kHalf) hi[r] = hn::MulAdd(ar, b_hi, hi[r]);
  }
}

// c[r, 0 : kPanel] = (load ? c : 0) + bias + sum over t < depth of
// a[r, t] * b[t, :] for r < kTileRows. Row t of b is at b + t * kPanel (a
// packed panel) or, kGathered, at b + b_rows[t]. With kPrefetch, it also
// prefetches its share of the next panel, from `next` on, a line after each
// kRowsPerLine steps (kSharePrefetch) or each step (kDensePrefetch; see
// Pass). (A prefetch every step in every block slowed bf16 products,
// docs/performance.md#gemm-prefetch; a branch on the step, or the prefetch
// first in the step, made GCC 12 store every sum every step.)
template <int kTileRows, bool kGathered, Prefetch kPrefetch, bool kHalf = false>
void Tile(const float* HWY_RESTRICT a, int64_t lda, const float* HWY_RESTRICT b, const int64_t* b_rows,
          int64_t depth, float* HWY_RESTRICT c, int64_t ldc, bool load, const float* col_bias,
          const float* row_bias, const char* next) {
  constexpr int64_t kLine = kPrefetch == kSharePrefetch ? kRowsPerLine<float> : 1;
  V lo[kTileRows], hi[kTileRows];
  StartSums<kTileRows, kHalf>(lo, hi, c, ldc, load, col_bias, row_bias);
  int64_t t = 0;
  for (; t + kLine <= depth; t += kLine) {
    for (int64_t u = 0; u < kLine; ++u) Step<kTileRows, kGathered, kHalf>(lo, hi, a, lda, b, b_rows, t + u);
    if constexpr (kPrefetch != kNoPrefetch) PrefetchLine(next + t / kLine * 64);
  }
  for (; t < depth; ++t) Step<kTileRows, kGathered, kHalf>(lo, hi, a, lda, b, b_rows, t);
  StoreSums<kTileRows, kHalf>(lo, hi, c, ldc);
}

// bf16 products (AVX512-BF16's vdpbf16ps; Highway 1.0 has no op for it): the
// same tile over bf16 A and a pack_bf16 panel, two of K's rows a step. Each
// 32-bit lane of the panel's pair row holds column j of rows t and t + 1,
// each of A's broadcasts a[r, t] and a[r, t + 1]: one instruction adds both
// products to column j's sum.
#define KILN_GEMM_BF16 (HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3)
#if KILN_GEMM_BF16
#pragma GCC push_options
#pragma GCC target("avx512bf16")
template <int kTileRows, bool kHalf>
HWY_INLINE void StepBf16(V* lo, V* hi, const bf16* HWY_RESTRICT a, int64_t lda, const bf16* HWY_RESTRICT b,
                         int64_t t) {
  const auto b_lo = (__m512bh)_mm512_loadu_si512(b + t * kPanel);
  const auto b_hi = kHalf ? b_lo : (__m512bh)_mm512_loadu_si512(b + t * kPanel + kPanel);
  for (int r = 0; r < kTileRows; ++r) {
    int32_t pair;
    std::memcpy(&pair, a + r * lda + t, sizeof(pair));
    const auto ar = (__m512bh)_mm512_set1_epi32(pair);
    lo[r].raw = _mm512_dpbf16_ps(lo[r].raw, ar, b_lo);
    if (!kHalf) hi[r].raw = _mm512_dpbf16_ps(hi[r].raw, ar, b_hi);
  }
}
template <int kTileRows, Prefetch kPrefetch, bool kHalf = false>
void TileBf16(const bf16* HWY_RESTRICT a, int64_t lda, const bf16* HWY_RESTRICT b, const int64_t*, int64_t depth,
              float* HWY_RESTRICT c, int64_t ldc, bool load, const float* col_bias, const float* row_bias,
              const char* next) {
  constexpr int64_t kLine = kPrefetch == kSharePrefetch ? kRowsPerLine<bf16> : 2;
  V lo[kTileRows], hi[kTileRows];
  StartSums<kTileRows, kHalf>(lo, hi, c, ldc, load, col_bias, row_bias);
  int64_t t = 0;
  for (; t + kLine <= depth; t += kLine) {
    for (int64_t u = 0; u < kLine; u += 2) StepBf16<kTileRows, kHalf>(lo, hi, a, lda, b, t + u);
    if constexpr (kPrefetch != kNoPrefetch) PrefetchLine(next + t / kLine * 64);
  }
  for (; t < depth; t += 2) StepBf16<kTileRows, kHalf>(lo, hi, a, lda, b, t);
  StoreSums<kTileRows, kHalf>(lo, hi, c, ldc);
}
#pragma GCC pop_options

// AMX tile products (CPUs with AMX-BF16, gemm::has_amx_products()): a tile
// is up to 32 rows of C by one panel (32 columns), four 16 x 16 f32
// accumulator tiles (tmm0-3: rows 0-15 and 16-31 by columns 0-15 and
// 16-31), fed per 32 of K by A's rows (tmm4-5: 16 rows x 32 bf16 each) and
// the panel's (tmm6-7: 16 pairs of K's rows x 16 columns, the pairs
// interleaved as pack_bf16 lays them out, which is AMX's own B layout), so
// packed B and rounded A serve both kinds of products. A pass loads the
// configuration once (ConfigureAmx; again only for a last tile of fewer
// rows), not at every tile: oneDNN's kernels, on the same threads, load
// their own. A tile whose sums start from zero zeroes its accumulators
// instead of loading C, and each step loads an operand just before its
// first product. Those three took the products at 512 x 384 x 384 on one
// core from 640 to 1208 GFLOP/s (docs/performance.md#gemm-amx).
#pragma GCC push_options
#pragma GCC target("avx512bf16,amx-tile,amx-bf16")
constexpr int64_t kAmxRows = 32, kAmxDepth = 32;
static_assert(kBlockRows % kAmxRows == 0);

struct alignas(64) AmxConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Loads the tile configuration for TileAmx over `rows` rows.
void ConfigureAmx(int64_t rows) {
  const int64_t rows0 = std::min<int64_t>(rows, 16), rows1 = rows - rows0;
  AmxConfig config;
  for (int t : {0, 1, 4}) config.rows[t] = uint8_t(rows0), config.colsb[t] = 64;
  if (rows1 > 0)
    for (int t : {2, 3, 5}) config.rows[t] = uint8_t(rows1), config.colsb[t] = 64;
  for (int t : {6, 7}) config.rows[t] = 16, config.colsb[t] = 64;
  // GCC 12 takes ldtilecfg to read the first bytes alone and drops the
  // stores of the rows and widths: this barrier keeps them.
  asm volatile("" : : "r"(&config) : "memory");
  _tile_loadconfig(&config);
}

// C rows [0, rows) of a panel (c, ldc floats a row) += A (rows x depth bf16,
// lda apart) x the panel's K rows (b, depth even). Unless `load`, C starts
// from the bias (col_bias[j] + row_bias[i], either null) instead of its contents.
template <bool kTwoRowTiles>
void TileAmx(const bf16* HWY_RESTRICT a, int64_t lda, const bf16* HWY_RESTRICT b, int64_t depth, float* c,
             int64_t ldc, int64_t rows, bool load, const float* col_bias, const float* row_bias) {
  static_assert(kPanel == 32, "an AMX tile pair covers 32 columns");
  const bool biased = col_bias || row_bias;
  if (!load && biased)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < kPanel; ++j)
        c[r * ldc + j] = (col_bias ? col_bias[j] : 0.0f) + (row_bias ? row_bias[r] : 0.0f);
  // GCC's tile loads are asm statements that name no memory they read: this
  // barrier (and the tail's below) keep the stores of C, A and B before them.
  asm volatile("" : : : "memory");
  const int64_t lda_bytes = lda * int64_t(sizeof(bf16)), ldc_bytes = ldc * int64_t(sizeof(float));
  constexpr int64_t kPairRow = 2 * kPanel;  // bf16 of one pair of K's rows of the panel
  if (load || biased) {
    _tile_loadd(0, c, ldc_bytes);
    _tile_loadd(1, c + 16, ldc_bytes);
    if (kTwoRowTiles) {
      _tile_loadd(2, c + 16 * ldc, ldc_bytes);
      _tile_loadd(3, c + 16 * ldc + 16, ldc_bytes);
    }
  } else {  // sums from zero: C is only written
    _tile_zero(0);
    _tile_zero(1);
    if (kTwoRowTiles) {
      _tile_zero(2);
      _tile_zero(3);
    }
  }
  auto step = [&](const bf16* a_at, int64_t a_stride, const bf16* b_at) {
    _tile_loadd(4, a_at, a_stride);
    _tile_loadd(6, b_at, kPairRow * int64_t(sizeof(bf16)));
    _tile_dpbf16ps(0, 4, 6);
    _tile_loadd(7, b_at + kPanel, kPairRow * int64_t(sizeof(bf16)));
    _tile_dpbf16ps(1, 4, 7);
    if (kTwoRowTiles) {
      _tile_loadd(5, a_at + 16 * a_stride / int64_t(sizeof(bf16)), a_stride);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
  };
  const int64_t whole = depth / kAmxDepth * kAmxDepth;
  for (int64_t t = 0; t < whole; t += kAmxDepth) step(a + t, lda_bytes, b + t / 2 * kPairRow);
  if (whole < depth) {  // K's last (< 32) columns, zero-padded to a whole tile
    const int64_t tail = depth - whole;
    HWY_ALIGN bf16 a_tail[kAmxRows * kAmxDepth] = {};
    HWY_ALIGN bf16 b_tail[kAmxDepth / 2 * kPairRow] = {};
    for (int64_t r = 0; r < rows; ++r) std::memcpy(a_tail + r * kAmxDepth, a + r * lda + whole, size_t(tail) * sizeof(bf16));
    std::memcpy(b_tail, b + whole / 2 * kPairRow, size_t(tail / 2 * kPairRow) * sizeof(bf16));
    asm volatile("" : : "r"(a_tail), "r"(b_tail) : "memory");  // the copies are read by the tile loads
    step(a_tail, kAmxDepth * int64_t(sizeof(bf16)), b_tail);
  }
  _tile_stored(0, c, ldc_bytes);
  _tile_stored(1, c + 16, ldc_bytes);
  if (kTwoRowTiles) {
    _tile_stored(2, c + 16 * ldc, ldc_bytes);
    _tile_stored(3, c + 16 * ldc + 16, ldc_bytes);
  }
}
#pragma GCC pop_options
#endif

template <typename T>
using TileFn = void (*)(const T*, int64_t, const T*, const int64_t*, int64_t, float*, int64_t, bool, const float*,
                        const float*, const char*);

template <bool kGathered, Prefetch kPrefetch, bool kHalf, int... kTileRows>
constexpr auto MakeTiles(std::integer_sequence<int, kTileRows...>) {
  return std::array<TileFn<float>, sizeof...(kTileRows)>{&Tile<kTileRows + 1, kGathered, kPrefetch, kHalf>...};
}
// [r - 1]: the tile of r rows, for the last rows of C; B packed (prefetching
// or not) or gathered; half tiles for a last panel of at most kLanes
// columns (packed B: a gathered one has whole panels).
constexpr auto kPackedTiles = MakeTiles<false, kNoPrefetch, false>(std::make_integer_sequence<int, kRows>());
constexpr auto kPrefetchingTiles = MakeTiles<false, kSharePrefetch, false>(std::make_integer_sequence<int, kRows>());
constexpr auto kDensePrefetchingTiles =
    MakeTiles<false, kDensePrefetch, false>(std::make_integer_sequence<int, kRows>());
constexpr auto kGatheredTiles = MakeTiles<true, kNoPrefetch, false>(std::make_integer_sequence<int, kRows>());
constexpr auto kHalfTiles = MakeTiles<false, kNoPrefetch, true>(std::make_integer_sequence<int, kRows>());
#if KILN_GEMM_BF16
template <Prefetch kPrefetch, bool kHalf, int... kTileRows>
constexpr auto MakeBf16Tiles(std::integer_sequence<int, kTileRows...>) {
  return std::array<TileFn<bf16>, sizeof...(kTileRows)>{&TileBf16<kTileRows + 1, kPrefetch, kHalf>...};
}
constexpr auto kBf16Tiles = MakeBf16Tiles<kNoPrefetch, false>(std::make_integer_sequence<int, kRows>());
constexpr auto kPrefetchingBf16Tiles = MakeBf16Tiles<kSharePrefetch, false>(std::make_integer_sequence<int, kRows>());
constexpr auto kDensePrefetchingBf16Tiles =
    MakeBf16Tiles<kDensePrefetch, false>(std::make_integer_sequence<int, kRows>());
constexpr auto kHalfBf16Tiles = MakeBf16Tiles<kNoPrefetch, true>(std::make_integer_sequence<int, kRows>());
#endif

// Of a packed B's tile tables, the one that prefetches as `prefetch` says.
template <typename Tiles>
const Tiles& ByPrefetch(Prefetch prefetch, const Tiles& none, const Tiles& share, const Tiles& dense) {
  return prefetch == kSharePrefetch ? share : prefetch == kDensePrefetch ? dense : none;
}

// The tile of `rows` rows for p's operands, over `cols` columns of a panel.
// (A half tile does not prefetch: the pass's last panel is the one that
// would.)
TileFn<float> TileFor(const Problem& p, int64_t rows, int64_t cols, Prefetch prefetch) {
  if (cols <= kLanes && !p.b_rows) return kHalfTiles[size_t(rows - 1)];
  if (p.b_rows) return kGatheredTiles[size_t(rows - 1)];
  return ByPrefetch(prefetch, kPackedTiles, kPrefetchingTiles, kDensePrefetchingTiles)[size_t(rows - 1)];
}
#if KILN_GEMM_BF16
TileFn<bf16> TileFor(const Bf16Problem&, int64_t rows, int64_t cols, Prefetch prefetch) {
  if (cols <= kLanes) return kHalfBf16Tiles[size_t(rows - 1)];
  return ByPrefetch(prefetch, kBf16Tiles, kPrefetchingBf16Tiles, kDensePrefetchingBf16Tiles)[size_t(rows - 1)];
}
#endif

// The activation, scale and residual of a tile's sums: rows [0, rows) x
// columns [0, cols) of `sums` (`lds` floats a row, a stage in L1) into c
// (the bias went in with the first products). `scale` is e.scale at the
// tile's first column (row `first_row` of the product is c's first),
// `residual` the tile's corner of the residual (shaped and strided like c);
// either may be null.
struct Identity {
  HWY_INLINE V operator()(D, V x) const { return x; }
};
void Finish(const float* sums, int64_t lds, float* c, int64_t ldc, int64_t rows, int64_t cols, const Epilogue& e,
            const float* scale_at, int64_t first_row, const float* residual) {
  auto finish = [&](const auto& activation) {
    const D d;
    for (int64_t r = 0; r < rows; ++r) {
      const float* in = sums + r * lds;
      float* row = c + r * ldc;
      const float* add = residual ? residual + r * ldc : nullptr;
      const float* scale =
          scale_at && e.scale_rows ? scale_at + (first_row + r) / e.scale_rows * e.scale_stride : scale_at;
      int64_t j = 0;
      for (; j + kLanes <= cols; j += kLanes) {
        V y = activation(d, hn::LoadU(d, in + j));
        if (scale) y = hn::Mul(y, hn::LoadU(d, scale + j));
        hn::StoreU(add ? hn::Add(y, hn::LoadU(d, add + j)) : y, d, row + j);
      }
      if (j == cols) continue;
      simd::HWY_NAMESPACE::unary_loop(in + j, row + j, size_t(cols - j), activation);
      for (; j < cols; ++j) {
        if (scale) row[j] *= scale[j];
        if (add) row[j] += add[j];
      }
    }
  };
  if (e.activate) simd::HWY_NAMESPACE::visit_unary(e.activation, e.params, finish);
  else finish(Identity());
}

// Rows [0, rows) x columns [0, cols) of `from` into `to`. A whole panel's
// width is copied as a constant size, in vector moves: as a variable one
// (a `rep movsq`), each row's copy cost more than its 128 bytes warrant
// (docs/performance.md#gemm-packing).
void CopyRows(const float* from, int64_t ld_from, float* to, int64_t ld_to, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    if (cols == kPanel) std::memcpy(to + r * ld_to, from + r * ld_from, sizeof(float) * kPanel);
    else std::memcpy(to + r * ld_to, from + r * ld_from, sizeof(float) * size_t(cols));
  }
}

// Rows [m0, m1) of A over K's slice [t0, t0 + depth), against every panel;
// in AMX tiles of up to kAmxRows rows (kAmx), else of up to kRows.
template <typename T, bool kAmx = false>
void Pass(const Product<T>& p, const Epilogue& e, int64_t m0, int64_t m1, int64_t t0, int64_t depth,
          bool prefetch) {
#if KILN_GEMM_BF16
  constexpr int64_t kStep = kAmx ? kAmxRows : kRows;
#else
  static_assert(!kAmx);
  constexpr int64_t kStep = kRows;
#endif
  HWY_ALIGN float stage[kStep * kPanel];  // a tile's sums on their way to C (below)
  HWY_ALIGN float edge_bias[kPanel];      // the bias of a panel cut short by C's last columns, padded
  const bool first = t0 == 0;             // the bias goes in with the first slice of products
  const bool load = !first || e.accumulate;
  const bool finish = t0 + depth >= p.k && (e.activate || e.scale || e.residual);
  const int64_t width = (p.n + kPanel - 1) / kPanel * kPanel;  // columns of packed B
  const bool whole_block = m1 - m0 == kBlockRows;                // its tiles share the prefetching
  [[maybe_unused]] int64_t configured = -1;  // the rows AMX's tiles are configured for (ConfigureAmx)
  auto run = [&](int64_t j0, int64_t i0) {
    // Panel j0 / kPanel from row t0; gathered, columns j0 on of rows t0 on.
    const T* b = p.packed_b + j0 * p.k + t0 * kPanel;
    // With `prefetch`, the packed B read after this panel's slice: the next
    // panel's, else the next slice's first panel, else the panel after these
    // columns (where multiply() goes next; past the end a prefetch does
    // nothing). The block's tiles prefetch it in equal shares.
    const T* next = j0 + kPanel < p.n  ? b + p.k * kPanel
                    : t0 + depth < p.k ? p.packed_b + (t0 + depth) * kPanel
                                       : p.packed_b + width * p.k;
    if constexpr (std::is_same_v<T, float>)
      if (p.b_rows) b = p.packed_b + gathered_column(p, j0);
    const int64_t* b_rows = p.b_rows ? p.b_rows + t0 : nullptr;
    const int64_t cols = std::min(kPanel, p.n - j0);
    const float* col_bias = first && e.bias && !e.bias_per_row ? e.bias + j0 : nullptr;
    if (col_bias && cols < kPanel) {
      std::copy(col_bias, col_bias + cols, edge_bias);
      std::fill(edge_bias + cols, edge_bias + kPanel, 0.0f);
      col_bias = edge_bias;
    }
    {
      const int64_t rows = std::min<int64_t>(kStep, m1 - i0), index = (i0 - m0) / kStep;
      // The tile's share of the next panel: an equal one in a whole block,
      // else half (or all) of it for each of the block's first tiles.
      const Prefetch mode = !prefetch ? kNoPrefetch
                            : whole_block ? kSharePrefetch
                            : index < kDensePrefetchers<T> ? kDensePrefetch
                                                           : kNoPrefetch;
      const T* a = p.a + i0 * p.lda + t0;
      const char* share = reinterpret_cast<const char*>(next) +
                          index * depth * (whole_block ? kNextBytesPerRow<T> : kDenseBytesPerRow<T>);
      const float* row_bias = first && e.bias && e.bias_per_row ? e.bias + i0 : nullptr;
      float* c = p.c + i0 * p.ldc + j0;
      const float* residual = e.residual ? e.residual + i0 * p.ldc + j0 : nullptr;
      auto tile = [&](float* sums, int64_t ld) {
#if KILN_GEMM_BF16
        if constexpr (kAmx) {
          if (rows != configured) ConfigureAmx(rows), configured = rows;
          if (rows > 16) return TileAmx<true>(a, p.lda, b, depth, sums, ld, rows, load, col_bias, row_bias);
          return TileAmx<false>(a, p.lda, b, depth, sums, ld, rows, load, col_bias, row_bias);
        }
#endif
        TileFor(p, rows, cols, mode)(a, p.lda, b, b_rows, depth, sums, ld, load, col_bias, row_bias, share);
      };
      if (cols == kPanel && !finish) return tile(c, p.ldc);
      // A tile cut short by C's last columns, or one with an epilogue, keeps
      // its sums in `stage` (L1), which Finish reads: C is then only
      // written, where reading the sums back from C waited for its lines
      // (C's first writing; Finish's samples in perf sat mostly on that load
      // and on the residual's: docs/performance.md#gemm-packing). The residual's
      // lines, written long before, are asked for now and arrive while the
      // products run.
      if (residual)
        for (int64_t r = 0; r < rows; ++r) {
          const char* line = reinterpret_cast<const char*>(residual + r * p.ldc);
          for (int64_t byte = 0; byte < cols * 4; byte += 64) __builtin_prefetch(line + byte, 0, 3);
          __builtin_prefetch(line + cols * 4 - 1, 0, 3);
        }
      if (load) CopyRows(c, p.ldc, stage, kPanel, rows, cols);  // a later slice adds to the sums so far
      tile(stage, kPanel);
      if (finish)
        Finish(stage, kPanel, c, p.ldc, rows, cols, e, e.scale ? e.scale + j0 : nullptr, e.first_row + i0, residual);
      else
        CopyRows(stage, kPanel, c, p.ldc, rows, cols);
    }
  };
  if (kAmx) {  // rows outer: a tile's rows of A stay near while it passes over the panels
    for (int64_t i0 = m0; i0 < m1; i0 += kStep)
      for (int64_t j0 = 0; j0 < p.n; j0 += kPanel) run(j0, i0);
  } else {
    for (int64_t j0 = 0; j0 < p.n; j0 += kPanel)
      for (int64_t i0 = m0; i0 < m1; i0 += kStep) run(j0, i0);
  }
}

template <typename T, bool kAmx = false>
void Block(const Product<T>& p, const Epilogue& e, bool prefetch) {
  if (p.m <= 0 || p.n <= 0) return;
  // K in equal slices of at most kSliceDepth floats' bytes (a K of 1153 is
  // two of 577, not 1152 and 1), bf16 ones of even length.
  constexpr int64_t kSteps = 4 / sizeof(T), kMaxSlice = kAmx ? kAmxSliceDepth : kSliceDepth * kSteps;
  const int64_t slices = std::max<int64_t>(1, (p.k + kMaxSlice - 1) / kMaxSlice);
  const int64_t slice =  // K = 0: one pass, the bias alone
      std::max<int64_t>(kSteps, (p.k + slices * kSteps - 1) / (slices * kSteps) * kSteps);
  auto pass = [&](int64_t m0, int64_t t0) {
    Pass<T, kAmx>(p, e, m0, std::min(p.m, m0 + kBlockRows), t0, std::min(slice, p.k - t0), prefetch);
  };
  if (kAmx) {  // slices outer: a slice of B's panels stays in L2 for every block of rows (split_across_threads)
    for (int64_t t0 = 0; t0 < p.k || t0 == 0; t0 += slice)
      for (int64_t m0 = 0; m0 < p.m; m0 += kBlockRows) pass(m0, t0);
  } else {
    for (int64_t m0 = 0; m0 < p.m; m0 += kBlockRows)
      for (int64_t t0 = 0; t0 < p.k || t0 == 0; t0 += slice) pass(m0, t0);
  }
}

void BlockF32(const Problem& p, const Epilogue& e, bool prefetch) { Block(p, e, prefetch); }

bool Bf16Products() {
#if KILN_GEMM_BF16
  return __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

void BlockBf16(const Bf16Problem& p, const Epilogue& e, bool prefetch, bool amx) {
#if KILN_GEMM_BF16
  if (amx) return Block<bf16, true>(p, e, prefetch);
  Block(p, e, prefetch);
#else
  (void)p, (void)e, (void)prefetch, (void)amx;
  HWY_ABORT("bf16 products on a CPU without them (see gemm::has_bf16_products)");
#endif
}

// One pair of K's rows (t, t + 1) of a panel, kPanel columns from `row`
// (the pair's first row; `next` the second, or null past an odd K's end),
// rounded and interleaved as the products read them: 2 * kPanel bf16.
// Rows whose columns are contiguous (a weight, attention's V) go a vector of
// each row at a time; anything else, or a partial panel, element by element
// (docs/performance.md#gemm-packing). Attention's Kᵀ, whose pairs of rows
// are adjacent floats, goes 32 rows at a time by PackBf16Columns'
// transposes instead, where the CPU has AVX-512 (as gathers of 8-byte pairs
// it went slower, the gathers waiting on K's lines); only its last K % 32
// rows come here.
HWY_INLINE void PackBf16Pair(const float* row, const float* next, int64_t col_stride, int64_t cols, float scale,
                             bf16* packed) {
  const D d;
  const hn::RebindToSigned<D> di;
  const V vscale = hn::Set(d, scale);
  if (cols == kPanel && col_stride == 1) {
    for (int64_t j = 0; j < kPanel; j += kLanes) {
      const auto lo = simd::HWY_NAMESPACE::Bf16Bits(d, hn::Mul(hn::LoadU(d, row + j), vscale));
      const auto hi = next ? simd::HWY_NAMESPACE::Bf16Bits(d, hn::Mul(hn::LoadU(d, next + j), vscale)) : hn::Zero(di);
      hn::StoreU(hn::BitCast(d, hn::Or(lo, hn::ShiftLeft<16>(hi))), d, reinterpret_cast<float*>(packed + 2 * j));
    }
    return;
  }
  for (int64_t j = 0; j < cols; ++j) {
    packed[2 * j] = f32_to_bf16(row[j * col_stride] * scale);
    packed[2 * j + 1] = next ? f32_to_bf16(next[j * col_stride] * scale) : bf16{0};
  }
  std::fill(packed + 2 * cols, packed + 2 * kPanel, bf16{0});
}

#if KILN_TRANSPOSE16
// Pair rows [t0 / 2, t0 / 2 + 16) of a whole panel whose columns hold their
// pairs as adjacent floats (row stride 1: attention's Kᵀ, read from K's
// rows), from b at (t0, the panel's first column): each column's 32 floats
// rounded into 16 pairs in one vector, then 16 columns' vectors turned
// around (Transpose16) into their pairs' rows.
void PackBf16Columns(const float* b, int64_t col_stride, float scale, bf16* packed) {
  const D d;
  const V vscale = hn::Set(d, scale);
  // _mm512_packus_epi32 interleaves its operands' 128-bit blocks: block L
  // holds pairs 2L, 2L + 1 of the first 16 floats, then of the second 16.
  const __m512i in_order = _mm512_setr_epi32(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
  for (int64_t h = 0; h < kPanel; h += 16) {
    __m512 r[16];
    for (int64_t i = 0; i < 16; ++i) {
      const float* column = b + (h + i) * col_stride;
      const auto lo = simd::HWY_NAMESPACE::Bf16Bits(d, hn::Mul(hn::LoadU(d, column), vscale));
      const auto hi = simd::HWY_NAMESPACE::Bf16Bits(d, hn::Mul(hn::LoadU(d, column + 16), vscale));
      r[i] = _mm512_castsi512_ps(_mm512_permutexvar_epi32(in_order, _mm512_packus_epi32(lo.raw, hi.raw)));
    }
    simd::HWY_NAMESPACE::Transpose16(r);
    for (int64_t p = 0; p < 16; ++p) _mm512_storeu_ps(reinterpret_cast<float*>(packed + p * 2 * kPanel + 2 * h), r[p]);
  }
}
#endif

void PackBf16(const float* b, int64_t row_stride, int64_t col_stride, int64_t k, int64_t n, bf16* packed,
              float scale) {
  for (int64_t j0 = 0; j0 < n; j0 += kPanel) {
    const int64_t cols = std::min(kPanel, n - j0);
    int64_t t = 0;
#if KILN_TRANSPOSE16
    if (row_stride == 1 && col_stride != 1 && cols == kPanel)
      for (; t + 32 <= k; t += 32, packed += 32 * kPanel) PackBf16Columns(b + t + j0 * col_stride, col_stride, scale, packed);
#endif
    for (; t < k; t += 2, packed += 2 * kPanel) {
      const float* row = b + t * row_stride + j0 * col_stride;
      PackBf16Pair(row, t + 1 < k ? row + row_stride : nullptr, col_stride, cols, scale, packed);
    }
  }
}

// gemm::round_rows (gemm.h) on one thread, into rows of `depth`. Where bf16
// products run (AVX512-BF16), by vcvtneps2bf16: one instruction where
// StoreBf16 takes seven.
#if KILN_GEMM_BF16
#pragma GCC push_options
#pragma GCC target("avx512bf16")
#endif
void RoundRows(const float* a, int64_t lda, int64_t rows, int64_t k, int64_t depth, bf16* out, int64_t ld_out) {
  const D d;
  for (int64_t i = 0; i < rows; ++i, a += lda, out += ld_out) {
    int64_t t = 0;
#if KILN_GEMM_BF16
    for (; t + kLanes <= k; t += kLanes)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + t), (__m256i)_mm512_cvtneps_pbh(hn::LoadU(d, a + t).raw));
#else
    for (; t + kLanes <= k; t += kLanes) simd::HWY_NAMESPACE::StoreBf16(d, hn::LoadU(d, a + t), out + t);
#endif
    for (; t < k; ++t) out[t] = f32_to_bf16(a[t]);
    if (k < depth) out[k] = bf16{0};
  }
}
#if KILN_GEMM_BF16
#pragma GCC pop_options
#endif

}  // namespace HWY_NAMESPACE
}  // namespace kiln::gemm
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <oneapi/dnnl/dnnl.hpp>

namespace kiln::gemm {

HWY_EXPORT(PanelWidth);
HWY_EXPORT(Pack);
HWY_EXPORT(BlockF32);
HWY_EXPORT(Bf16Products);
HWY_EXPORT(BlockBf16);
HWY_EXPORT(PackBf16);
HWY_EXPORT(RoundRows);

int64_t panel_width() { return HWY_DYNAMIC_DISPATCH(PanelWidth)(); }

int64_t packed_floats(int64_t k, int64_t n) {
  const int64_t w = panel_width();
  return std::max<int64_t>(k, 1) * ((n + w - 1) / w * w);
}

void pack(const float* b, int64_t row_stride, int64_t col_stride, int64_t k, int64_t n, float* packed,
          float scale) {
  HWY_DYNAMIC_DISPATCH(Pack)(b, row_stride, col_stride, k, n, packed, scale);
}

bool has_bf16_products() {
  static const bool has = [] {
    return HWY_DYNAMIC_DISPATCH(Bf16Products)() && simd_targets::onednn_has(dnnl_cpu_isa_avx512_core_bf16);
  }();
  return has;
}

bool has_amx_products() {
  static const bool has = [] {
    // ONEDNN_MAX_CPU_ISA below AMX stands in for a CPU without it (as for AVX512-BF16 above).
    if (!has_bf16_products() || !simd_targets::onednn_has(dnnl_cpu_isa_avx512_core_amx)) return false;
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 22)) || !(d & (1u << 24))) return false;  // AMX-BF16, AMX-TILE
    // Linux hands out the tile registers' state on request (ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA).
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return has;
}

int64_t packed_bf16_count(int64_t k, int64_t n) { return packed_floats(bf16_depth(k), n); }

void pack_bf16(const float* b, int64_t row_stride, int64_t col_stride, int64_t k, int64_t n, bf16* packed,
               float scale) {
  HWY_DYNAMIC_DISPATCH(PackBf16)(b, row_stride, col_stride, k, n, packed, scale);
}

namespace {

// Whether the tiles prefetch B's next panel into L2 as they go (see Pass):
// where packed B is larger than a core's L2, so that its panels come from
// L3 or DRAM each time a block of A's rows passes over them. Prefetched by
// the first tile of a block alone, a panel from DRAM held DiT's MLP products
// (2048 x 4608 x 1152) behind oneDNN's; a B that fits L2 stays there, and
// prefetching it only slowed the products (docs/performance.md#gemm-prefetch).
template <typename T>
bool prefetches_b(const Product<T>& p) {
  constexpr int64_t kL2Bytes = int64_t(1) << 20;
  return !p.b_rows && p.k * int64_t(sizeof(T)) * packed_floats(1, p.n) > kL2Bytes;
}

void run_block(const Problem& p, const Epilogue& e, bool prefetch) {
  HWY_DYNAMIC_DISPATCH(BlockF32)(p, e, prefetch);
}
void run_block(const Bf16Problem& p, const Epilogue& e, bool prefetch) {
  assert(p.k % 2 == 0 && !p.b_rows);
  HWY_DYNAMIC_DISPATCH(BlockBf16)(p, e, prefetch, has_amx_products());
}

// Tiles of C: up to kTileUnits units of kUnit rows (every target's tile
// divides 12) by kTilePanels panels (split_across_threads).
constexpr int64_t kUnit = 12, kTileUnits = 8, kTilePanels = 4, kMaxParts = 64;

}  // namespace

// An odd number of cache lines where rows are long, so that a tile's rows
// fall in different L1 sets. At a whole number of 4 KiB pages (Wan's K of
// 14336: 28 KiB) every row of an AMX tile fell in one set, more lines than
// its ways, and each tile's loads went to L2.
int64_t bf16_row_stride(int64_t k) {
  constexpr int64_t kLine = 64 / int64_t(sizeof(bf16)), kPadFrom = 8 * kLine;
  const int64_t depth = bf16_depth(k), lines = (depth + kLine - 1) / kLine;
  if (depth < kPadFrom) return depth;
  return (lines % 2 ? lines : lines + 1) * kLine;
}

namespace {

// Where packed B is at most kRowsFirstBBytes, the threads split C by rows
// alone: each then reads the rows of A that it wrote itself in the op
// before (a norm, which splits rows alike, or a product so split), from its
// own caches, and all of B, which a shared L3 holds. A larger B would be
// read from DRAM once for each thread: the columns split then. With F32Rows
// rows first, each thread rounds the rows its tiles read into its own slot
// of the scratch, once for each run of its tiles over the same rows (a
// tile's rows stay in L2 while it passes over their columns); otherwise a
// pass rounds the whole of A first, as each thread would round all of it.
// The limit and the rounding pass were measured against the split before and
// their alternatives: docs/performance.md#gemm-threads.
constexpr int64_t kRowsFirstBBytes = int64_t(5) << 19;  // 2.5 MiB
template <typename T>
bool splits_rows_first(int64_t n, int64_t k) {  // B k x n
  return packed_floats(k, n) * int64_t(sizeof(T)) <= kRowsFirstBBytes;
}

// A thread's slot of F32Rows::scratch: which rows of A it holds (first row
// and count, -1 for none), then those rows in bf16.
constexpr size_t kHeldBytes = 64;
size_t rounded_slot_bytes(int64_t m, int64_t k) {
  const int64_t rows = std::min(kTileUnits * kUnit, m);  // a tile's at most
  return thread_slot_bytes(kHeldBytes + size_t(rows * bf16_row_stride(k)) * sizeof(bf16));
}

// Rows [i0, i0 + rows) of A rounded into slot `slot`, unless it holds them
// already (the thread's tile before covered the same rows).
const bf16* rounded_rows(const F32Rows& a, int64_t m, int64_t i0, int64_t rows, int slot) {
  char* base = static_cast<char*>(a.scratch) + size_t(slot) * rounded_slot_bytes(m, a.k);
  int64_t* held = reinterpret_cast<int64_t*>(base);
  bf16* out = reinterpret_cast<bf16*>(base + kHeldBytes);
  if (held[0] != i0 || held[1] != rows) {
    HWY_DYNAMIC_DISPATCH(RoundRows)(a.a + i0 * a.lda, a.lda, rows, a.k, bf16_depth(a.k), out, bf16_row_stride(a.k));
    held[0] = i0, held[1] = rows;
  }
  return out;
}

template <typename T>
void split_across_threads(const Product<T>& p, const Epilogue& e, bool parallel, const F32Rows* f32_rows = nullptr) {
  // The threads split C into a grid of equal parts (in units of 12 rows, which
  // every target's tile divides, by one panel), picking the grid whose
  // largest part is smallest; among equals, the one that splits the columns
  // most, so that each thread streams its own share of B (a weight). Each
  // thread then walks its part in tiles of up to 96 rows by 4 panels, rows
  // outer (a tile's rows of A stay in L2 while it passes over their
  // columns) unless B is large (below), and helps with the others' tiles
  // when done (ShareQueue). (Handing out tiles statically
  // instead left whole tiles to one thread, and small products lost most of
  // the second thread's gain: docs/performance.md#gemm-threads.) Where B is
  // small, rows alone split (kRowsFirstBBytes).
  assert(p.b_segment == 0);  // see gemm.h
  const bool prefetch = prefetches_b(p);  // decided on the whole of B, not a thread's tiles
  const int64_t w = panel_width(), panels = (p.n + w - 1) / w, units = (p.m + kUnit - 1) / kUnit;
  // Below 2^20 multiply-adds (a few µs) one thread finishes first: a region
  // wakes the other threads, and the next op then reads C from their caches.
  // A lower bound (2^18) slowed dispatch-bound models, whose 2^18-2^20
  // products then ran on two threads; 2^21 measured no better than 2^20
  // (docs/performance.md#gemm-threads).
  constexpr int64_t kMinThreadedMacs = int64_t(1) << 20;
  const bool threads = parallel && p.m * p.n * p.k >= kMinThreadedMacs && worth_threads(true);
  const int64_t team = threads ? std::min<int64_t>(omp_get_max_threads(), kMaxParts) : 1;
  auto parts = [](int64_t n, int64_t k) { return (n + k - 1) / k; };
  int64_t row_parts = 1, largest = -1;
  for (int64_t r = 1; r <= team; ++r) {
    if (team % r) continue;
    const int64_t size = parts(units, r) * parts(panels, team / r);
    if (largest < 0 || size < largest) row_parts = r, largest = size;
  }
  if (splits_rows_first<T>(p.n, p.k) && units >= team) row_parts = team;
  const int64_t col_parts = team / row_parts;
  struct Part {
    int64_t u0, u1, c0, c1, col_tiles;
  };
  auto part_of = [&](int64_t part) {
    const int64_t rp = part / col_parts, cp = part % col_parts;
    Part q{units * rp / row_parts, units * (rp + 1) / row_parts, panels * cp / col_parts,
           panels * (cp + 1) / col_parts, 0};
    q.col_tiles = parts(q.c1 - q.c0, kTilePanels);
    return q;
  };
  // Where B is a large packed weight (the columns split) of AMX products, a
  // thread's tiles go columns outer: each panel of B then comes from DRAM
  // once and stays in L2 (or L3) while the tiles below pass over it, where
  // rows outer read the thread's whole share of B again for every 96 rows.
  // A, the smaller operand, is read again instead. Wan2.2's transformer (10
  // GB of weights, 640 rows a product) took 0.76x the time a step
  // (docs/performance.md#gemm-amx). Measured on AMX only, so only there.
  const bool cols_outer =
      std::is_same_v<T, bf16> && has_amx_products() && !p.b_rows && !f32_rows && !splits_rows_first<T>(p.n, p.k);
  // Where a tile's panels are more than L2 holds beside A's rows (Wan's K of
  // 14336), a tile is a whole column of the part, 4 panels by all its rows,
  // which Block walks a slice of K at a time: each slice of the panels then
  // stays in L2 for every row. Elsewhere smaller tiles share the work out
  // more evenly.
  constexpr int64_t kWholeColumnBytes = int64_t(1) << 20;
  const bool whole_columns = cols_outer && p.k * w * kTilePanels * int64_t(sizeof(T)) > kWholeColumnBytes;
  // Tile `index` of a part, rows or columns outer (see above).
  auto run_tile = [&](const Part& part, int64_t index) {
    const int64_t row_tiles = parts(part.u1 - part.u0, kTileUnits);
    const int64_t u = whole_columns ? part.u0
                      : part.u0 + (cols_outer ? index % row_tiles : index / part.col_tiles) * kTileUnits;
    const int64_t column = whole_columns ? index : cols_outer ? index / row_tiles : index % part.col_tiles;
    const int64_t c = part.c0 + column * kTilePanels;
    const int64_t i0 = u * kUnit, j0 = c * w;
    Product<T> q = p;
    q.m = std::min((whole_columns ? part.u1 : std::min(u + kTileUnits, part.u1)) * kUnit, p.m) - i0;
    q.n = std::min(std::min(c + kTilePanels, part.c1) * w, p.n) - j0;
    if constexpr (std::is_same_v<T, bf16>)
      if (f32_rows) {
        q.a = rounded_rows(*f32_rows, p.m, i0, q.m, team > 1 ? omp_get_thread_num() : 0);
        q.lda = bf16_row_stride(f32_rows->k);
      }
    if (!f32_rows) q.a += i0 * p.lda;
    q.packed_b += p.b_rows ? j0 : j0 * p.k;
    q.c += i0 * p.ldc + j0;
    Epilogue f = e;
    if (e.bias) f.bias += e.bias_per_row ? i0 : j0;
    if (e.scale) f.scale += j0, f.first_row += i0;
    if (e.residual) f.residual += i0 * p.ldc + j0;
    run_block(q, f, prefetch);
  };
  auto tiles_in = [&](const Part& part) {
    return whole_columns ? part.col_tiles : parts(part.u1 - part.u0, kTileUnits) * part.col_tiles;
  };
  if (f32_rows)  // the slots' rows are left from an earlier product (or are none)
    for (int slot = 0, slots = team > 1 ? omp_get_max_threads() : 1; slot < slots; ++slot) {
      int64_t* held = reinterpret_cast<int64_t*>(static_cast<char*>(f32_rows->scratch) +
                                                 size_t(slot) * rounded_slot_bytes(p.m, f32_rows->k));
      held[0] = held[1] = -1;
    }
  if (team == 1) {
    const Part all = part_of(0);
    for (int64_t t = 0, n = tiles_in(all); t < n; ++t) run_tile(all, t);
    return;
  }
  std::array<Part, kMaxParts> grid;
  std::array<ShareQueue, kMaxParts> queues;
  for (size_t part = 0; part < size_t(team); ++part) {
    grid[part] = part_of(int64_t(part));
    queues[part].reset(tiles_in(grid[part]));
  }
  drain_shares(queues.data(), team, [&](int64_t part, int64_t t) { run_tile(grid[size_t(part)], t); });
}

}  // namespace

void block(const Problem& p, const Epilogue& e) { run_block(p, e, prefetches_b(p)); }
void block(const Bf16Problem& p, const Epilogue& e) { run_block(p, e, prefetches_b(p)); }
void multiply(const Problem& p, const Epilogue& e, bool parallel) { split_across_threads(p, e, parallel); }
void multiply(const Bf16Problem& p, const Epilogue& e, bool parallel) { split_across_threads(p, e, parallel); }

namespace {

// round_rows() with the rounded rows ld_out apart.
void round_rows_to(const float* a, int64_t lda, int64_t rows, int64_t k, bf16* out, int64_t ld_out, bool parallel) {
  parallel_ranges(rows, parallel && rows * k >= kParallelMinElements, [&](int64_t begin, int64_t end) {
    HWY_DYNAMIC_DISPATCH(RoundRows)(a + begin * lda, lda, end - begin, k, bf16_depth(k), out + begin * ld_out, ld_out);
  });
}

}  // namespace

void round_rows(const float* a, int64_t lda, int64_t rows, int64_t k, bf16* out, bool parallel) {
  round_rows_to(a, lda, rows, k, out, bf16_depth(k), parallel);
}

size_t f32_rows_scratch(int64_t m, int64_t n, int64_t k, int threads) {
  if (splits_rows_first<bf16>(n, bf16_depth(k))) return size_t(threads) * rounded_slot_bytes(m, k);
  return size_t(m * bf16_row_stride(k)) * sizeof(bf16);
}

void multiply(const Bf16Problem& p, const F32Rows& a, const Epilogue& e, bool parallel) {
  assert(p.k == bf16_depth(a.k));
  if (splits_rows_first<bf16>(p.n, p.k)) return split_across_threads(p, e, parallel, &a);
  bf16* rounded = static_cast<bf16*>(a.scratch);
  const int64_t stride = bf16_row_stride(a.k);
  round_rows_to(a.a, a.lda, p.m, a.k, rounded, stride, parallel);
  Bf16Problem q = p;
  q.a = rounded, q.lda = stride;
  split_across_threads(q, e, parallel);
}

}  // namespace kiln::gemm
#endif  // HWY_ONCE
