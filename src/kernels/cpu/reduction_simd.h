// f32 row routines behind the reduction and norm kernels (cpu/reduction.cc,
// cpu/fused.cc), defined in reduction_simd.cc for each x86 SIMD target
// Highway knows; the best one is picked at run time. Each runs its rows on
// the OpenMP pool when the work pays for it.
#pragma once

#include <cstdint>

namespace kiln::reduction_simd {

void softmax_rows(const float* x, float* y, int64_t rows, int64_t n);
void sum_rows(const float* x, float* y, int64_t rows, int64_t n, float scale);
void max_rows(const float* x, float* y, int64_t rows, int64_t n);
void sum_columns(const float* x, float* y, int64_t outer, int64_t n, int64_t inner, float scale);
void max_columns(const float* x, float* y, int64_t outer, int64_t n, int64_t inner);

// A norm's per-element affine: row r's scale and bias are the n values at
// scale + r / rows_per_step * scale_step (bias likewise); a step of 0 gives
// every row the same. bias may be null.
struct RowAffine {
  const float* scale = nullptr;
  const float* bias = nullptr;
  int64_t rows_per_step = 1, scale_step = 0, bias_step = 0;
};
// y = (x - mean) / sqrt(var + eps) * scale + bias over each row of n; mean
// and inv_std (either may be null) receive each row's statistics.
void layer_norm_rows(const float* x, float* y, int64_t rows, int64_t n, float eps, const RowAffine& affine,
                     float* mean, float* inv_std);
void instance_norm_rows(const float* x, float* y, int64_t rows, int64_t n, int64_t channels, float eps,
                        const float* scale, const float* bias);
void group_norm_rows(const float* x, float* y, int64_t rows, int64_t channels, int64_t spatial,
                     int64_t num_channels, float eps, const float* scale, const float* bias, bool silu);

// y = x / sqrt(mean(x^2) + eps) * scale[c] (then SiLU), the mean over n
// values `inner` apart: x is [outer, n, inner] and the norm runs along n.
void rms_norm(const float* x, float* y, int64_t outer, int64_t n, int64_t inner, float eps, const float* scale,
              bool silu);

}  // namespace kiln::reduction_simd
