// Flash attention in f32 over strided operands, behind the kiln.Attention CPU
// kernel (cpu/attention.cc). Compiled for each x86 SIMD target Highway knows;
// the best one is picked at run time.
//
// Every operand is seen as four logical dims through element strides (a
// rank-3 node gets a leading batch dim of 1, stride 0):
//   q [b0, b1, Sq, D]   k [b0, b1, D, Sk]   v [b0, b1, Sk, Dv]
//   mask [b0, b1, Sq, Sk] (stride 0 along broadcast dims)   y [b0, b1, Sq, Dv]
//
//   attention_simd::Problem p = ...;
//   float* scratch = ...;  // attention_simd::scratch_floats(p) per thread that may run
//   attention_simd::attention_f32(p, scratch, parallel);
#pragma once

#include <array>
#include <cstdint>

#include "core/dtype.h"
#include "kernels/cpu/parallel.h"

namespace kiln::attention_simd {

using Strides = std::array<int64_t, 4>;

struct Problem {
  int64_t b0 = 1, b1 = 1, sq = 0, sk = 0, d = 0, dv = 0;
  float scale = 1;
  const float *q = nullptr, *k = nullptr, *v = nullptr;
  const float* mask = nullptr;  // null when the node has none
  float* y = nullptr;
  Strides q_stride{}, k_stride{}, v_stride{}, mask_stride{}, y_stride{};
};

// Query rows one task holds at most (two vectors of the widest target), and
// keys per online-softmax block.
inline constexpr int64_t kMaxRows = 32;
inline constexpr int64_t kKeyBlock = 64;

// Scratch floats one thread needs: the packed query rows, a block of scores
// and the output accumulator, padded to thread_slot_bytes (parallel.h).
inline int64_t scratch_floats(const Problem& p) {
  return thread_slot<float>((p.d + kKeyBlock + p.dv) * kMaxRows);
}

// y = softmax(q k * scale + mask) v. `scratch` (64-byte aligned) holds one
// scratch_floats(p) slot per thread: omp_get_max_threads() slots when
// `parallel`, else one. Requires sk > 0.
void attention_f32(const Problem& p, float* scratch, bool parallel);

// One online-softmax step over a block of scores held row-major (bf16
// attention's, attention_bf16.h): for each row r < rows, s[r * lds + j] for
// j < keys. max[r] and sum[r] are the running max and sum of exps (-inf and
// 0 before the first block; max becomes NaN for good once a NaN is seen);
// the scores become exp(s - new max) and alpha[r] = exp(old max - new max),
// the factor the row's accumulated output is scaled by. With
// `probabilities`, the exps go there instead, rounded to bf16 (to nearest
// even; the sums are of the f32 exps), in rows of the same stride lds;
// where bf16 products run, those exps are only as exact as bf16 needs
// (within a relative 7.9e-5; the rounding's half ulp is 2^-8).
void online_softmax_rows(float* s, int64_t rows, int64_t keys, int64_t lds, float* max, float* sum, float* alpha,
                         bf16* probabilities = nullptr);

}  // namespace kiln::attention_simd
