// kiln.Attention in bf16 (a node marked by passes' assign_precision): flash
// attention whose two products run on oneDNN's bf16 matmul (AVX512-BF16 or
// AMX tiles), with the softmax in f32.
//
// K and V are rounded to bf16 once per call, Kᵀ and V of each head packed
// contiguously; then each task (one head, kTileRows query rows) walks the
// keys in blocks of kKeyBlock:
//   S = (Q scale) Kᵀ_block            bf16 x bf16 -> f32, oneDNN
//   S += mask; online softmax: running max and sum per row, S = exp(S - max)
//   O = O exp(old max - max) + bf16(S) V_block            oneDNN, then f32
// and y = O / sum. Rows whose scores are all -inf, or hold a NaN, are NaN,
// as softmax gives.
//
// The oneDNN primitives (one per tile shape: full and last row tiles, full
// and last key blocks), a stream per thread and their memory objects are
// built once by create(); run() only re-points memory objects and executes,
// so a compiled plan keeps a Bf16Attention as its step state.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <memory>
#include <vector>

#include "core/status.h"
#include "kernels/cpu/attention_simd.h"

namespace kiln {

class Bf16Attention {
 public:
  static constexpr int64_t kTileRows = 128;
  static constexpr int64_t kKeyBlock = 512;

  // For p's sizes (its pointers are not read). Fails where oneDNN has no
  // bf16 matmul on this CPU.
  static Result<std::unique_ptr<Bf16Attention>> create(const attention_simd::Problem& p, const dnnl::engine& engine);
  ~Bf16Attention();

  // Scratch run() needs, 64-byte aligned.
  size_t scratch_bytes() const { return scratch_bytes_; }
  // y = softmax(q k scale + mask) v for a problem of the sizes create() saw.
  Status run(const attention_simd::Problem& p, void* scratch);

 private:
  struct Product;  // one matmul primitive and, per thread, its memory objects
  struct Layout;   // where each part of the scratch lies

  Bf16Attention() = default;
  bool attend(const attention_simd::Problem& p, int64_t batch, int64_t row0, int thread, char* scratch);

  int64_t rows_ = 0, keys_ = 0;  // tile rows and key block, at most the problem's
  int threads_ = 1;
  std::vector<dnnl::stream> streams_;  // one per thread
  // scores_[i][j], values_[i][j]: i = 0 a full row tile, 1 the last (shorter)
  // one; j likewise for key blocks.
  std::unique_ptr<Product> scores_[2][2], values_[2][2];
  size_t scratch_bytes_ = 0, thread_bytes_ = 0, packed_bytes_ = 0, dnnl_scratch_bytes_ = 0;
};

}  // namespace kiln
