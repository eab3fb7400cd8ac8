// One scheduler update as every scheduler kiln runs can be written
// (pipeline/scheduler.h builds the per-step coefficients):
//
//   x0       = d_x * x + d_out * model_output           the step's x0 estimate
//   x_next   = c_x * x + c_out * model_output + c_prev * x0_prev + c_noise * noise
//
// One function, used by the host loop and by kiln.DenoiseStep inside a
// compiled loop, so both give the same bits.
#pragma once

#include <cstddef>

namespace kiln {

struct DenoiseCoefficients {
  float c_x = 0, c_out = 0, c_prev = 0, c_noise = 0, d_x = 0, d_out = 0;
};
// The rows of kiln.DenoiseStep's coefficient table, in this order.
inline constexpr int kDenoiseCoefficientRows = 6;

// x0_prev may be null when c_prev is 0, noise when c_noise is 0, x0 when
// the caller needs no x0 estimate. Outputs may share memory with inputs:
// element i of every input is read before element i of an output is written.
inline void denoise_update(const DenoiseCoefficients& k, const float* x, const float* model_output,
                           const float* x0_prev, const float* noise, float* x_next, float* x0, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float xi = x[i], out = model_output[i];
    float next = k.c_x * xi + k.c_out * out;
    if (x0_prev) next += k.c_prev * x0_prev[i];
    if (noise) next += k.c_noise * noise[i];
    if (x0) x0[i] = k.d_x * xi + k.d_out * out;
    x_next[i] = next;
  }
}

}  // namespace kiln
