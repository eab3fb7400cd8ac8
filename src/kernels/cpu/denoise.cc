// kiln.DenoiseStep and kiln.UniPcStep on the CPU: one scheduler update inside a compiled
// denoise loop. The step index is the counter input, read when the step
// runs, so the plan replays the right coefficients every time (never values
// baked in when it was compiled); the counter output is counter + 1, which
// a loop binds over the counter input.
#include <cmath>

#include "core/rng.h"
#include "kernels/denoise_update.h"
#include "kernels/kernel.h"

namespace kiln {

// Coefficient column `step` of a [6, steps] table, checked.
Result<DenoiseCoefficients> denoise_coefficients(const KernelContext& ctx, int64_t step) {
  const TensorView& table = *ctx.input(4);
  const int64_t steps = table.shape[1];
  if (step < 0 || step >= steps)
    return invalid_argument("{}: step {} is outside the schedule's {} steps", node_label(*ctx.node), step, steps);
  const float* t = table.as<float>();
  return DenoiseCoefficients{t[step], t[steps + step], t[2 * steps + step],
                             t[3 * steps + step], t[4 * steps + step], t[5 * steps + step]};
}

Status cpu_DenoiseStep(KernelContext& ctx) {
  const TensorView &x = *ctx.input(0), &out = *ctx.input(1), &x0_prev = *ctx.input(2);
  const int64_t step = *ctx.input(3)->as<int64_t>();
  KILN_ASSIGN_OR_RETURN(DenoiseCoefficients k, denoise_coefficients(ctx, step));
  const size_t n = size_t(x.numel());
  // Ancestral noise for this step from kiln's generator, at the place in the
  // stream the host loop would have drawn it: after the initial latents,
  // ceil(n / 2) pairs per step.
  float* noise = nullptr;
  if (k.c_noise != 0.0f) {
    noise = static_cast<float*>(ctx.workspace->scratch(n * sizeof(float)));
    if (!noise) return resource_exhausted("{}: no scratch for the noise", node_label(*ctx.node));
    const uint64_t first = uint64_t(ctx.attrs().get_int("noise_first_pair", 0)) + uint64_t(step) * ((n + 1) / 2);
    NoiseStream(uint64_t(*ctx.input(5)->as<int64_t>()), first).fill(noise, n);
  }
  denoise_update(k, x.as<float>(), out.as<float>(), x0_prev.as<float>(), noise, ctx.output(0)->as<float>(),
                 ctx.output(1)->as<float>(), n);
  *ctx.output(2)->as<int64_t>() = step + 1;
  return ok_status();
}

// Coefficient column `step` of a [9, steps] table, checked.
Result<UniPcCoefficients> unipc_coefficients(const KernelContext& ctx, int64_t step) {
  const TensorView& table = *ctx.input(6);
  const int64_t steps = table.shape[1];
  if (step < 0 || step >= steps)
    return invalid_argument("{}: step {} is outside the schedule's {} steps", node_label(*ctx.node), step, steps);
  float row[kUniPcCoefficientRows];
  for (int r = 0; r < kUniPcCoefficientRows; ++r) row[r] = table.as<float>()[r * steps + step];
  return UniPcCoefficients{row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7], row[8]};
}

Status cpu_UniPcStep(KernelContext& ctx) {
  const int64_t step = *ctx.input(5)->as<int64_t>();
  KILN_ASSIGN_OR_RETURN(UniPcCoefficients k, unipc_coefficients(ctx, step));
  unipc_update(k, ctx.input(0)->as<float>(), ctx.input(1)->as<float>(), ctx.input(2)->as<float>(),
               ctx.input(3)->as<float>(), ctx.input(4)->as<float>(), ctx.output(0)->as<float>(),
               ctx.output(1)->as<float>(), ctx.output(2)->as<float>(), ctx.output(3)->as<float>(),
               size_t(ctx.input(0)->numel()));
  *ctx.output(4)->as<int64_t>() = step + 1;
  return ok_status();
}

}  // namespace kiln
