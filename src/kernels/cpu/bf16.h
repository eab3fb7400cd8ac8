// f32 -> bf16 rounding of whole buffers, for the kernels that compute in bf16
// (a node marked by passes' assign_precision): they round their f32 operands
// into scratch, then run bf16 products with f32 accumulation.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

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

// What runs the bf16 products of kiln.Linear, Gemm, MatMul by one matrix and
// 1-D and 2-D convolutions of one group.
enum class Bf16Gemm { kKiln, kOnednn };

// kiln's GEMM (gemm.h: vdpbf16ps, nothing allocated) where the CPU has
// AVX512-BF16 and oneDNN sees no AMX; oneDNN's primitives where it does
// (its tile products run at several times vdpbf16ps' rate: oneDNN's bf16
// matmul is reported at 1.8-2.9 TFLOP/s on two AMX cores, where vdpbf16ps
// tops out near twice f32's 0.4) and where the CPU has no AVX512-BF16.
// Environment variable KILN_BF16_GEMM=kiln or =onednn overrides the choice
// (kiln only where the CPU has AVX512-BF16), to compare the two; read once.
// kiln.Attention runs on kiln's GEMM wherever the CPU has AVX512-BF16: oneDNN
// has no fused attention to hand it to.
Bf16Gemm bf16_gemm();
std::string_view bf16_gemm_name(Bf16Gemm gemm);  // "kiln", "onednn"
// The choice and its reason, for kiln bench: "kiln's GEMM (AVX512-BF16, no AMX)".
std::string describe_bf16_gemm();

// KILN_BF16_GEMM's value checked: an error naming it unless it is unset,
// empty, auto, kiln or onednn. The CLI refuses to start on one (bf16_gemm()
// alone would take it as auto).
Status check_bf16_gemm_setting();

// Input `index` (f32) rounded into kernel scratch: as bf16 where
// onednn_has_bf16(), else as f32 rounded through bf16.
Result<void*> rounded_copy(KernelContext& ctx, size_t index);

}  // namespace kiln
