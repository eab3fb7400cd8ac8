// bf16 flash attention on kiln's GEMM (see attention_bf16.h).
//
// Where its time goes: the GEMM's tiles most of it, then the exps, packing
// Kᵀ and V and the softmax's max (a perf profile:
// docs/performance.md#bf16-attention). Tried and dropped: the f32 kernel's
// shape in bf16 (attention_simd.cc: 32 query rows in the lanes of two
// vectors, each step a vdpbf16ps of a pair of Q's columns against a pair
// broadcast from K, or from V packed in pairs of keys; no S round trip
// through L2 and no panel padding of Dv): a little faster than this kernel
// at 1024 tokens, clearly slower at 256 (8 or 12 columns a tile), so not
// worth a second kernel (docs/performance.md#bf16-attention). (GCC 12 kept
// its tile's sums in memory until every loop over them had #pragma GCC
// unroll.)
#include "kernels/cpu/attention_bf16.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/parallel.h"

namespace kiln::attention_bf16 {

namespace {

using attention_simd::Problem;

constexpr size_t kAlign = 64;
size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// Where each part of the scratch lies: every head's packed Kᵀ and V, then a
// slot per thread.
struct Layout {
  int64_t depth;       // D rounded up to even: the depth of S's product
  int64_t rows, keys;  // a task's rows and a block's keys, at most the problem's
  int64_t lds;         // row stride of S and P: keys rounded up to even
  size_t kt_bytes, v_block_bytes, head_bytes, slot_bytes;

  explicit Layout(const Problem& p)
      : depth(gemm::bf16_depth(p.d)),
        rows(std::min(kTileRows, p.sq)),
        keys(std::min(kKeyBlock, p.sk)),
        lds(gemm::bf16_depth(keys)) {
    kt_bytes = aligned(size_t(gemm::packed_bf16_count(p.d, p.sk)) * sizeof(bf16));
    v_block_bytes = aligned(size_t(gemm::packed_bf16_count(keys, p.dv)) * sizeof(bf16));
    head_bytes = kt_bytes + size_t(blocks(p)) * v_block_bytes;
    slot_bytes = thread_slot_bytes(o() + aligned(size_t(rows * p.dv) * 4) + aligned(size_t(rows) * 3 * 4));
  }
  int64_t blocks(const Problem& p) const { return (p.sk + keys - 1) / keys; }
  // Offsets in a thread's slot: Q's rows, S, P, O, then max, sum and alpha.
  size_t q() const { return 0; }
  size_t s() const { return q() + aligned(size_t(rows * depth) * sizeof(bf16)); }
  size_t p() const { return s() + aligned(size_t(rows * lds) * 4); }
  size_t o() const { return p() + aligned(size_t(rows * lds) * sizeof(bf16)); }
};

// One task: rows [row0, row0 + rows) of head `batch`, on `slot`; the products
// across `threads` when the task runs alone.
void attend_rows(const Problem& p, const Layout& l, const char* heads, int64_t batch, int64_t row0, char* slot,
                 bool threads) {
  const int64_t b0 = batch / p.b1, b1 = batch % p.b1, rows = std::min(l.rows, p.sq - row0);
  const bf16* kt = reinterpret_cast<const bf16*>(heads + size_t(batch) * l.head_bytes);
  const char* v_blocks = heads + size_t(batch) * l.head_bytes + l.kt_bytes;
  bf16* q = reinterpret_cast<bf16*>(slot + l.q());
  float* s = reinterpret_cast<float*>(slot + l.s());
  bf16* pr = reinterpret_cast<bf16*>(slot + l.p());
  float* o = reinterpret_cast<float*>(slot + l.o());
  float* max = o + l.rows * p.dv;
  float* sum = max + l.rows;
  float* alpha = sum + l.rows;

  // Q's rows rounded (an odd D's pad column zero; the scale went into Kᵀ);
  // the running statistics reset.
  const float* q_in = p.q + b0 * p.q_stride[0] + b1 * p.q_stride[1] + row0 * p.q_stride[2];
  if (p.q_stride[3] == 1) gemm::round_rows(q_in, p.q_stride[2], rows, p.d, q, false);
  else
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t t = 0; t < p.d; ++t) q[r * l.depth + t] = f32_to_bf16(q_in[r * p.q_stride[2] + t * p.q_stride[3]]);
      if (p.d < l.depth) q[r * l.depth + p.d] = bf16{0};
    }
  std::fill_n(max, rows, -std::numeric_limits<float>::infinity());
  std::fill_n(sum, rows, 0.0f);
  const float* mask =
      p.mask ? p.mask + b0 * p.mask_stride[0] + b1 * p.mask_stride[1] + row0 * p.mask_stride[2] : nullptr;
  for (int64_t key0 = 0, block = 0; key0 < p.sk; key0 += l.keys, ++block) {
    const int64_t keys = std::min(l.keys, p.sk - key0);
    // A block of keys starts a whole number of panels in: its panels of Kᵀ
    // start at column key0.
    gemm::multiply(gemm::Bf16Problem{rows, keys, l.depth, q, l.depth, kt + key0 * l.depth, s, l.lds}, {}, threads);
    if (mask)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < keys; ++c) s[r * l.lds + c] += mask[r * p.mask_stride[2] + (key0 + c) * p.mask_stride[3]];
    attention_simd::online_softmax_rows(s, rows, keys, l.lds, max, sum, alpha, pr);
    const int64_t depth = gemm::bf16_depth(keys);
    for (int64_t r = 0; r < rows; ++r) {
      if (keys < depth) pr[r * l.lds + keys] = bf16{0};
      if (key0 > 0)
        for (int64_t e = 0; e < p.dv; ++e) o[r * p.dv + e] *= alpha[r];
    }
    const auto* v = reinterpret_cast<const bf16*>(v_blocks + size_t(block) * l.v_block_bytes);
    gemm::multiply(gemm::Bf16Problem{rows, p.dv, depth, pr, l.lds, v, o, p.dv}, {.accumulate = key0 > 0}, threads);
  }
  float* y = p.y + b0 * p.y_stride[0] + b1 * p.y_stride[1] + row0 * p.y_stride[2];
  for (int64_t r = 0; r < rows; ++r) {
    // Every score -inf, or a NaN among them: NaN, as softmax gives.
    const float inv = std::isfinite(max[r]) ? 1.0f / sum[r] : std::numeric_limits<float>::quiet_NaN();
    for (int64_t e = 0; e < p.dv; ++e) y[r * p.y_stride[2] + e * p.y_stride[3]] = o[r * p.dv + e] * inv;
  }
}

}  // namespace

size_t scratch_bytes(const Problem& p, int threads) {
  const Layout l(p);
  return size_t(p.b0 * p.b1) * l.head_bytes + size_t(threads) * l.slot_bytes;
}

void attend(const Problem& p, void* scratch, int threads) {
  const Layout l(p);
  char* base = static_cast<char*>(scratch);
  const int64_t heads = p.b0 * p.b1, blocks = l.blocks(p);
  // Kᵀ [D, Sk] and V [Sk, Dv] of each head rounded and packed, a block of
  // keys a task: Kᵀ's columns of the block (whole panels from key0), and
  // the block's rows of V as one packed operand.
  parallel_for(heads * blocks, threads > 1 && heads * p.sk * (p.d + p.dv) >= kParallelMinElements,
               [&](int64_t task) {
                 const int64_t batch = task / blocks, block = task % blocks, b0 = batch / p.b1, b1 = batch % p.b1;
                 const int64_t key0 = block * l.keys, keys = std::min(l.keys, p.sk - key0);
                 char* head = base + size_t(batch) * l.head_bytes;
                 const float* k = p.k + b0 * p.k_stride[0] + b1 * p.k_stride[1] + key0 * p.k_stride[3];
                 const float* v = p.v + b0 * p.v_stride[0] + b1 * p.v_stride[1] + key0 * p.v_stride[2];
                 gemm::pack_bf16(k, p.k_stride[2], p.k_stride[3], p.d, keys,
                                 reinterpret_cast<bf16*>(head) + key0 * l.depth, p.scale);
                 gemm::pack_bf16(v, p.v_stride[2], p.v_stride[3], keys, p.dv,
                                 reinterpret_cast<bf16*>(head + l.kt_bytes + size_t(block) * l.v_block_bytes));
               });
  const int64_t tiles = (p.sq + l.rows - 1) / l.rows;
  char* slots = base + size_t(heads) * l.head_bytes;
  // Each task on one thread; a lone one spreads its products instead.
  const bool parallel = heads * tiles > 1 && threads > 1;
  parallel_shares(heads * tiles, parallel, [&](int64_t task) {
    char* slot = slots + size_t(parallel ? omp_get_thread_num() : 0) * l.slot_bytes;
    attend_rows(p, l, base, task / tiles, task % tiles * l.rows, slot, !parallel && threads > 1);
  });
}

}  // namespace kiln::attention_bf16
