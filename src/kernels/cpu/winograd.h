// 3x3 convolutions (stride 1, no dilation, one group) by Winograd's minimal
// filtering F(m x m, 3x3) (Lavin and Gray, 2015): each m x m block of
// outputs ("tile") comes from its a x a block of inputs, a = m + 2, in a^2
// multiplications per pair of channels, where the direct convolution takes
// 9 m^2: F(2x2, 3x3) 16 for 36 (2.25x fewer), F(4x4, 3x3) 36 for 144 (4x):
//
//   U[xi] = G g G^T     every filter g (OC x IC of them), xi < a^2; once in a plan
//   V[xi] = B^T d B     every tile's input block d, per input channel
//   M[xi] = U[xi] V[xi] a^2 GEMMs of OC x IC by IC x tiles (kiln's GEMM, f32
//                       or bf16 products)
//   y     = A^T M A     (+ bias, + residual) for each tile and output channel
//
// F(2x2, 3x3)'s transform matrices hold 0, +-1 and +-1/2, so f32 results
// stay within a few ulps of the direct product's; F(4x4, 3x3)'s (entries up
// to 8, and 1/24) lose about 4 more bits, so it serves f32 products only
// (best_tile). The tiles go in chunks of up to kChunkTiles, taken across
// the batch's images, so V and M are a few MB, not the whole call's a^2 /
// m^2 times its input and output.
//
//   winograd::Conv c{...};
//   c.tile = winograd::best_tile(c, /*filters_kept=*/false, /*bf16=*/false);
//   if (c.tile) {
//     std::vector<float> u(winograd::filter_count(c, false));
//     winograd::transform_filters(c, w, u.data(), threads);
//     std::vector<char> scratch(winograd::scratch_bytes(c, threads, false));  // 64-byte aligned
//     winograd::convolve(c, x, u.data(), bias, residual, y, scratch.data(), threads);
//   }
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace kiln::winograd {

// An NCHW convolution by a 3x3 kernel [OC, IC, 3, 3], stride 1, no
// dilation; the output size is what the padding gives. `tile` is m of
// F(m x m, 3x3): 2 or 4.
struct Conv {
  int64_t batch = 0, in_channels = 0, height = 0, width = 0;
  int64_t out_channels = 0, out_height = 0, out_width = 0, pad_h = 0, pad_w = 0;
  int64_t tile = 2;
  int64_t tiles_h() const { return (out_height + tile - 1) / tile; }
  int64_t tiles_w() const { return (out_width + tile - 1) / tile; }
  int64_t points() const { return (tile + 2) * (tile + 2); }  // a^2: the GEMMs per chunk of tiles
};

// Tiles per chunk: the GEMMs' N (4 panels of 32 columns on AVX-512).
inline constexpr int64_t kChunkTiles = 128;

// The tile (m) faster than the direct GEMM here, or 0 where none is:
// enough channels for the GEMMs to run at speed, and enough tiles to fill
// their panels and pay for the transforms; more of them when the filters
// are transformed on every call (eager), fewer when a plan keeps them
// transformed; and where a kept U is larger than the f32 weight, enough
// multiplications saved for its extra bytes. 4 only for f32 products (see
// above). c.tile is ignored.
int64_t best_tile(const Conv& c, bool filters_kept, bool bf16);

// Values in the transformed filters, U: a^2 x OC x IC; with `bf16`, for
// bf16 products, a^2 x OC x IC rounded up to even.
size_t filter_count(const Conv& c, bool bf16);
// U from the weight w [OC, IC, 3, 3]; the bf16 one rounded to nearest even.
// A plan transforms a constant weight once and keeps U in place of it.
void transform_filters(const Conv& c, const float* w, float* u, int threads);
void transform_filters(const Conv& c, const float* w, bf16* u, int threads);

// Scratch bytes convolve() needs on `threads` threads (a multiple of 64),
// with f32 or (`bf16`) bf16 filters.
size_t scratch_bytes(const Conv& c, int threads, bool bf16);
// y = conv(x, w) + bias[oc] (null: none) + residual (shaped like y; null:
// none; it may be y itself), from w's transformed filters u, on `threads`
// threads (omp_get_max_threads() or 1). With bf16 filters the GEMMs run on
// bf16 products (the transformed inputs rounded, f32 sums): only where
// gemm::has_bf16_products().
void convolve(const Conv& c, const float* x, const float* u, const float* bias, const float* residual, float* y,
              void* scratch, int threads);
void convolve(const Conv& c, const float* x, const bf16* u, const float* bias, const float* residual, float* y,
              void* scratch, int threads);

}  // namespace kiln::winograd
