// kiln.Attention in bf16 (a node marked by passes' assign_precision): flash
// attention whose two products run on kiln's GEMM in bf16 (gemm.h's bf16
// products: AVX512-BF16, so only where gemm::has_bf16_products()), with the
// softmax in f32. It allocates nothing.
//
// Kᵀ and V of every head are rounded to bf16 and packed as the GEMM's B once
// per call (V one block of keys at a time); then each task (one head,
// kTileRows query rows) walks the keys in blocks of kKeyBlock:
//   S = Q (Kᵀ scale)_block            bf16 x bf16 -> f32
//   S += mask; online softmax: running max and sum per row, S = exp(S - max)
//   O = O exp(old max - max) + bf16(S) V_block
// and y = O / sum. Rows whose scores are all -inf, or hold a NaN, are NaN,
// as softmax gives.
//
//   std::vector<char> scratch(attention_bf16::scratch_bytes(p, threads));  // 64-byte aligned
//   attention_bf16::attend(p, scratch.data(), threads);
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/attention_simd.h"

namespace kiln::attention_bf16 {

inline constexpr int64_t kTileRows = 128;
inline constexpr int64_t kKeyBlock = 512;

// Scratch bytes attend() needs on `threads` threads (a multiple of 64).
size_t scratch_bytes(const attention_simd::Problem& p, int threads);
// y = softmax(q k scale + mask) v, on `threads` threads (omp_get_max_threads()
// or 1). Requires gemm::has_bf16_products() and sk > 0.
void attend(const attention_simd::Problem& p, void* scratch, int threads);

}  // namespace kiln::attention_bf16
