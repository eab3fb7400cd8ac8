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

// What runs the bf16 products of kiln.Linear, Gemm, MatMul and 1-D and 2-D
// convolutions of one group.
enum class Bf16Gemm {
  kKiln,     // kiln's GEMM on bf16 products (gemm.h: AMX tiles, or vdpbf16ps)
  kKilnF32,  // kiln's f32 GEMM on operands rounded through bf16: the same results
  kOnednn,   // oneDNN's bf16 primitives
};

// kiln's GEMM (nothing allocated) where the CPU has AVX512-BF16: on AMX
// tiles where it has AMX (gemm::has_amx_products(); several times
// vdpbf16ps' rate), else on vdpbf16ps; oneDNN's primitives only on an AMX
// CPU whose kernel refuses kiln the tile state. Where the CPU has no AVX512-BF16
// (gemm::has_bf16_products()), kiln's f32 GEMM on operands rounded through
// bf16: about f32's time, where oneDNN's primitives (bf16 emulated on
// AVX-512) took several times as long and allocated on every replay
// (measurements: docs/performance.md#bf16-products).
// Environment variable KILN_BF16_GEMM=kiln or =onednn overrides the choice,
// to compare the two; read once. kiln.Attention runs on kiln's GEMM wherever the CPU has
// AVX512-BF16 (oneDNN has no fused attention to hand it to), else on the f32
// kernel with its operands rounded through bf16.
Bf16Gemm bf16_gemm();
std::string_view bf16_gemm_name(Bf16Gemm gemm);  // "kiln", "kiln_f32", "onednn"
// The choice and its reason, for kiln bench: "kiln's GEMM (AVX512-BF16, no AMX)".
std::string describe_bf16_gemm();

// KILN_BF16_GEMM's value checked: an error naming it unless it is unset,
// empty, auto, kiln or onednn. The CLI refuses to start on one (bf16_gemm()
// alone would take it as auto).
Status check_bf16_gemm_setting();

// Input `index` (f32) rounded into kernel scratch: as bf16 where
// onednn_has_bf16(), else as f32 rounded through bf16.
Result<void*> rounded_copy(KernelContext& ctx, size_t index);
// n floats from x rounded through bf16 into kernel scratch (f32), for
// Bf16Gemm::kKilnF32's products.
Result<const float*> rounded_f32_copy(KernelContext& ctx, const float* x, int64_t n);

}  // namespace kiln
