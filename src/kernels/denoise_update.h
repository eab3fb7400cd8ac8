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

// UniPC (bh2) for a velocity (flow) model, one step as the same kind of
// elementwise form over its state: the latents x, the model output v, the
// corrected sample of the last step c, and the last two x0 estimates m1, m2:
//
//   m      = x + m_v v                                            this step's x0 estimate (m_v = -sigma)
//   c'     = c_x x + c_m m + c_c c + c_m1 m1 + c_m2 m2            the corrector (UniC) on x; x itself at step 0
//   x_next = p_c c' + p_m m + p_m1 m1                             the predictor (UniP) from c'
//
// and the state moves on: c <- c', m1 <- m, m2 <- m1.
struct UniPcCoefficients {
  float m_v = 0, c_x = 0, c_m = 0, c_c = 0, c_m1 = 0, c_m2 = 0, p_c = 0, p_m = 0, p_m1 = 0;
};
// The rows of kiln.UniPcStep's coefficient table, in this order.
inline constexpr int kUniPcCoefficientRows = 9;

// Outputs may share memory with the inputs they replace (x_next with x,
// c_next with c, m1_next with m1, m2_next with m2): element i of every input
// is read before element i of an output is written.
inline void unipc_update(const UniPcCoefficients& k, const float* x, const float* v, const float* c, const float* m1,
                         const float* m2, float* x_next, float* c_next, float* m1_next, float* m2_next, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float xi = x[i], older = m1[i];
    const float m = xi + k.m_v * v[i];
    const float corrected = k.c_x * xi + k.c_m * m + k.c_c * c[i] + k.c_m1 * older + k.c_m2 * m2[i];
    x_next[i] = k.p_c * corrected + k.p_m * m + k.p_m1 * older;
    c_next[i] = corrected;
    m2_next[i] = older;
    m1_next[i] = m;
  }
}

}  // namespace kiln
