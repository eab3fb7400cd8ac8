// f32 -> bf16 rounding of whole buffers, for the kernels that compute in bf16
// (a node marked by passes' assign_precision): they round their f32 operands
// into scratch, then run bf16 products with f32 accumulation.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "kernels/kernel.h"

namespace kiln {

// dst[i] = x[i] rounded to nearest even (NaN stays NaN), split across threads
// when `parallel` and n is large enough to pay for them.
void round_to_bf16(const float* x, bf16* dst, int64_t n, bool parallel);
// The same rounding, kept in f32 (what a CPU without bf16 products computes
// on, for the same results).
void round_through_bf16(const float* x, float* dst, int64_t n, bool parallel);

// Whether oneDNN has bf16 products on this CPU (AVX512-BF16, AMX, or
// AVX-512 emulation; checked once). Without them, bf16 nodes run f32
// products on operands rounded through bf16.
bool onednn_has_bf16();

// Input `index` (f32) rounded into kernel scratch: as bf16 where
// onednn_has_bf16(), else as f32 rounded through bf16.
Result<void*> rounded_copy(KernelContext& ctx, size_t index);

}  // namespace kiln
