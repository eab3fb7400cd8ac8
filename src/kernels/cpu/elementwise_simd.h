// f32 loops over one contiguous row, for the elementwise CPU kernels. Compiled
// for each x86 SIMD target Highway knows; the best one is picked at run time.
//
//   simd::unary_f32(simd::UnaryF32::kExp, x, y, n);
//   simd::binary_f32(simd::BinaryF32::kAdd, a, 1, &bias, 0, y, n);  // y = a + bias
//
// Transcendentals stay within a few ulp of libm (Erf: 2e-7 relative); inputs
// outside a fast formula's range (huge Sin/Cos arguments, Log of 0 or of a
// negative, Exp overflow, NaN) get libm's answer.
#pragma once

#include <cstddef>

namespace kiln::simd {

enum class UnaryF32 {
  kSqrt, kReciprocal, kNeg, kAbs, kExp, kLog, kErf, kTanh, kSigmoid,
  kRelu, kLeakyRelu, kClip, kCos, kSin,
  kGelu, kGeluTanh, kSilu,  // the fused activations (kiln.Gelu, kiln.Silu)
};
struct UnaryF32Params {
  float alpha = 0;       // LeakyRelu slope; Silu's x sigmoid(alpha x)
  float lo = 0, hi = 0;  // Clip bounds
};
// y may equal x.
void unary_f32(UnaryF32 op, const float* x, float* y, size_t n, const UnaryF32Params& params = {});

enum class BinaryF32 { kAdd, kSub, kMul, kDiv, kMin, kMax };
// a_step / b_step: 1 walks the operand, 0 repeats its first element. y may
// equal a or b. Min/Max propagate NaN.
void binary_f32(BinaryF32 op, const float* a, size_t a_step, const float* b, size_t b_step,
                float* y, size_t n);

}  // namespace kiln::simd
