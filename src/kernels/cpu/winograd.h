// 3x3 convolutions (stride 1, no dilation, one group) by Winograd's minimal
// filtering F(2x2, 3x3) (Lavin and Gray, 2015): each 2x2 block of outputs
// ("tile") comes from its 4x4 block of inputs in 16 multiplications per
// pair of channels, where the direct convolution takes 36:
//
//   U[xi] = G g G^T     every filter g (OC x IC of them), xi < 16; once in a plan
//   V[xi] = B^T d B     every tile's input block d, per input channel
//   M[xi] = U[xi] V[xi] 16 GEMMs of OC x IC by IC x tiles (kiln's GEMM, f32
//                       or bf16 products)
//   y     = A^T M A     (+ bias, + residual) for each tile and output channel
//
// with the transform matrices of F(2x2, 3x3), whose entries are 0, +-1 and
// +-1/2, so f32 results stay within a few ulps of the direct product's. The
// tiles go in chunks of kChunkTiles per task, so V and M are a few MB per
// thread, not the whole image's 16 / 4 times its input and output.
//
//   winograd::Conv c{...};
//   if (winograd::pays_off(c, /*filters_kept=*/false)) {
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
// dilation; the output size is what the padding gives.
struct Conv {
  int64_t batch = 0, in_channels = 0, height = 0, width = 0;
  int64_t out_channels = 0, out_height = 0, out_width = 0, pad_h = 0, pad_w = 0;
  int64_t tiles_h() const { return (out_height + 1) / 2; }
  int64_t tiles_w() const { return (out_width + 1) / 2; }
};

// Tiles per chunk: the GEMMs' N (4 panels of 32 columns on AVX-512).
inline constexpr int64_t kChunkTiles = 128;

// Whether F(2x2, 3x3) is faster than the direct GEMM here: enough channels
// for its GEMMs to run at speed, and enough tiles to fill their panels and
// pay for the transforms; more of them when the filters are transformed on
// every call (eager), fewer when a plan keeps them transformed.
bool pays_off(const Conv& c, bool filters_kept);

// Values in the transformed filters, U: 16 x OC x IC; with `bf16`, for
// bf16 products, 16 x OC x IC rounded up to even.
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
