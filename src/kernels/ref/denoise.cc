// Reference kiln.DenoiseStep: the update written out in double, noise drawn
// the same way (it is part of the op's definition, not of its arithmetic).
#include <vector>

#include "core/rng.h"
#include "kernels/denoise_update.h"
#include "kernels/kernel.h"

namespace kiln {

Result<DenoiseCoefficients> denoise_coefficients(const KernelContext& ctx, int64_t step);  // cpu/denoise.cc
Result<UniPcCoefficients> unipc_coefficients(const KernelContext& ctx, int64_t step);      // cpu/denoise.cc

Status ref_DenoiseStep(KernelContext& ctx) {
  const TensorView &x = *ctx.input(0), &out = *ctx.input(1), &x0_prev = *ctx.input(2);
  const int64_t step = *ctx.input(3)->as<int64_t>();
  KILN_ASSIGN_OR_RETURN(DenoiseCoefficients k, denoise_coefficients(ctx, step));
  const size_t n = size_t(x.numel());
  std::vector<float> noise(n, 0.0f);
  if (k.c_noise != 0.0f)
    NoiseStream(uint64_t(*ctx.input(5)->as<int64_t>()),
                uint64_t(ctx.attrs().get_int("noise_first_pair", 0)) + uint64_t(step) * ((n + 1) / 2))
        .fill(noise.data(), n);
  float *next = ctx.output(0)->as<float>(), *x0 = ctx.output(1)->as<float>();
  for (size_t i = 0; i < n; ++i) {
    const double xi = x.as<float>()[i], o = out.as<float>()[i], p = x0_prev.as<float>()[i];
    x0[i] = float(double(k.d_x) * xi + double(k.d_out) * o);
    next[i] = float(double(k.c_x) * xi + double(k.c_out) * o + double(k.c_prev) * p + double(k.c_noise) * noise[i]);
  }
  *ctx.output(2)->as<int64_t>() = step + 1;
  return ok_status();
}

Status ref_UniPcStep(KernelContext& ctx) {
  const int64_t step = *ctx.input(5)->as<int64_t>();
  KILN_ASSIGN_OR_RETURN(UniPcCoefficients k, unipc_coefficients(ctx, step));
  const float *x = ctx.input(0)->as<float>(), *v = ctx.input(1)->as<float>(), *c = ctx.input(2)->as<float>();
  const float *m1 = ctx.input(3)->as<float>(), *m2 = ctx.input(4)->as<float>();
  for (int64_t i = 0; i < ctx.input(0)->numel(); ++i) {
    const double m = double(x[i]) + double(k.m_v) * v[i];
    const double corrected = double(k.c_x) * x[i] + double(k.c_m) * m + double(k.c_c) * c[i] +
                             double(k.c_m1) * m1[i] + double(k.c_m2) * m2[i];
    const double older = m1[i];
    ctx.output(0)->as<float>()[i] = float(double(k.p_c) * corrected + double(k.p_m) * m + double(k.p_m1) * older);
    ctx.output(1)->as<float>()[i] = float(corrected);
    ctx.output(2)->as<float>()[i] = float(m);
    ctx.output(3)->as<float>()[i] = float(older);
  }
  *ctx.output(4)->as<int64_t>() = step + 1;
  return ok_status();
}

}  // namespace kiln
