// f16 and bf16 values widened to f32, for the weights checkpoints store in
// half precision (kernels/kernel.h: stored weights). Highway per-target
// loops (F16C's conversion where the CPU has it), split across threads.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace kiln {

// dst[i] = src[i] as f32 (exactly: every f16 and bf16 value is an f32).
void widen_to_f32(const f16* src, float* dst, int64_t n);
void widen_to_f32(const bf16* src, float* dst, int64_t n);

// A new f32 tensor holding `v` (f16, bf16 or f32) widened.
Result<Tensor> widened_to_f32(const TensorView& v);

}  // namespace kiln
