// bf16 flash attention on oneDNN tiles (see attention_bf16.h).
#include "kernels/cpu/attention_bf16.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/parallel.h"

namespace kiln {

namespace {

using dnnl::memory;
constexpr size_t kAlign = 64;
size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

}  // namespace

// C[m, n] = A[m, k] B[k, n], A and B bf16, C f32, each through fixed strides;
// per thread one set of memory objects whose data handles run() re-points.
struct Bf16Attention::Product {
  dnnl::matmul primitive;
  size_t scratchpad_bytes = 0;
  struct Args {
    memory a, b, c, scratchpad;
    dnnl_exec_arg_t c_args[4];
  };
  std::vector<Args> per_thread;

  Product(const dnnl::engine& engine, int threads, memory::dims a_dims, memory::dims a_strides,
          memory::dims b_dims, memory::dims b_strides, memory::dims c_dims, memory::dims c_strides) {
    const memory::desc a(a_dims, memory::data_type::bf16, a_strides);
    const memory::desc b(b_dims, memory::data_type::bf16, b_strides);
    const memory::desc c(c_dims, memory::data_type::f32, c_strides);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // one per thread: tiles run concurrently
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, engine);
    primitive = dnnl::matmul(pd);
    scratchpad_bytes = pd.scratchpad_desc().get_size();
    per_thread.resize(size_t(threads));
    for (Args& t : per_thread) {
      t.a = memory(a, engine, nullptr);
      t.b = memory(b, engine, nullptr);
      t.c = memory(c, engine, nullptr);
      t.scratchpad = memory(pd.scratchpad_desc(), engine, nullptr);
      t.c_args[0] = {DNNL_ARG_SRC, t.a.get()};
      t.c_args[1] = {DNNL_ARG_WEIGHTS, t.b.get()};
      t.c_args[2] = {DNNL_ARG_DST, t.c.get()};
      t.c_args[3] = {DNNL_ARG_SCRATCHPAD, t.scratchpad.get()};
    }
  }

  bool execute(dnnl::stream& stream, int thread, const void* a, const void* b, void* c, void* scratchpad) {
    Args& t = per_thread[size_t(thread)];
    for (auto [mem, data] : {std::pair{&t.a, a}, {&t.b, b}, {&t.c, c}, {&t.scratchpad, scratchpad}})
      if (dnnl_memory_set_data_handle(mem->get(), const_cast<void*>(data)) != dnnl_success) return false;
    return dnnl_primitive_execute(primitive.get(), stream.get(), scratchpad_bytes ? 4 : 3, t.c_args) == dnnl_success;
  }
};

Bf16Attention::~Bf16Attention() = default;

// Scratch: the packed Kᵀ and V of every head (bf16), then one slot per thread.
struct Bf16Attention::Layout {
  int64_t d, dv, sk, rows, keys;
  size_t k_bytes() const { return size_t(sk * d) * 2; }  // one head's Kᵀ
  size_t v_bytes() const { return size_t(sk * dv) * 2; }
  // Offsets in a thread's slot.
  size_t q() const { return 0; }
  size_t s() const { return q() + aligned(size_t(rows * d) * 2); }
  size_t p() const { return s() + aligned(size_t(rows * keys) * 4); }
  size_t o_block() const { return p() + aligned(size_t(rows * keys) * 2); }
  size_t o() const { return o_block() + aligned(size_t(rows * dv) * 4); }
  size_t stats() const { return o() + aligned(size_t(rows * dv) * 4); }  // max, sum, alpha per row
  size_t dnnl() const { return stats() + aligned(size_t(rows) * 3 * 4); }
};

Result<std::unique_ptr<Bf16Attention>> Bf16Attention::create(const attention_simd::Problem& p,
                                                             const dnnl::engine& engine) {
  if (!onednn_has_bf16()) return unsupported("oneDNN has no bf16 matmul on this CPU");
  std::unique_ptr<Bf16Attention> a(new Bf16Attention());
  a->rows_ = std::min(kTileRows, p.sq);
  a->keys_ = std::min(kKeyBlock, p.sk);
  a->threads_ = omp_get_max_threads();
  const Layout l{p.d, p.dv, p.sk, a->rows_, a->keys_};
  try {
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j) {
        const int64_t m = i == 0 ? a->rows_ : (p.sq % a->rows_ ? p.sq % a->rows_ : a->rows_);
        const int64_t n = j == 0 ? a->keys_ : (p.sk % a->keys_ ? p.sk % a->keys_ : a->keys_);
        // S[m, n] (row stride keys) = Q[m, d] Kᵀ[d, n] (Kᵀ's row stride sk).
        a->scores_[i][j] = std::make_unique<Product>(engine, a->threads_, memory::dims{m, p.d}, memory::dims{p.d, 1},
                                                     memory::dims{p.d, n}, memory::dims{p.sk, 1},
                                                     memory::dims{m, n}, memory::dims{a->keys_, 1});
        // O_block[m, dv] = P[m, n] (row stride keys) V[n, dv].
        a->values_[i][j] = std::make_unique<Product>(engine, a->threads_, memory::dims{m, n},
                                                     memory::dims{a->keys_, 1}, memory::dims{n, p.dv},
                                                     memory::dims{p.dv, 1}, memory::dims{m, p.dv},
                                                     memory::dims{p.dv, 1});
        a->dnnl_scratch_bytes_ = std::max({a->dnnl_scratch_bytes_, a->scores_[i][j]->scratchpad_bytes,
                                           a->values_[i][j]->scratchpad_bytes});
      }
    for (int t = 0; t < a->threads_; ++t) a->streams_.emplace_back(engine);
  } catch (const dnnl::error& e) {
    if (e.status == dnnl_unimplemented) return unsupported("oneDNN has no bf16 matmul for attention tiles");
    return internal_error("bf16 attention: oneDNN: {}", e.what());
  }
  a->packed_bytes_ = aligned(size_t(p.b0 * p.b1) * (l.k_bytes() + l.v_bytes()));
  a->thread_bytes_ = l.dnnl() + aligned(a->dnnl_scratch_bytes_);
  a->scratch_bytes_ = a->packed_bytes_ + size_t(a->threads_) * a->thread_bytes_;
  return a;
}

// One task; false if oneDNN refused to execute.
bool Bf16Attention::attend(const attention_simd::Problem& p, int64_t batch, int64_t row0, int thread, char* scratch) {
  const Layout l{p.d, p.dv, p.sk, rows_, keys_};
  const int64_t b0 = batch / p.b1, b1 = batch % p.b1, rows = std::min(rows_, p.sq - row0);
  const bf16* kt = reinterpret_cast<const bf16*>(scratch + size_t(batch) * (l.k_bytes() + l.v_bytes()));
  const bf16* v = kt + p.sk * p.d;
  char* slot = scratch + packed_bytes_ + size_t(thread) * thread_bytes_;
  bf16* q = reinterpret_cast<bf16*>(slot + l.q());
  float* s = reinterpret_cast<float*>(slot + l.s());
  bf16* pr = reinterpret_cast<bf16*>(slot + l.p());
  float* o_block = reinterpret_cast<float*>(slot + l.o_block());
  float* o = reinterpret_cast<float*>(slot + l.o());
  float* max = reinterpret_cast<float*>(slot + l.stats());
  float* sum = max + rows_;
  float* alpha = sum + rows_;
  void* dnnl_scratch = slot + l.dnnl();

  // Q's rows times the scale, rounded; the running statistics reset.
  const float* q_in = p.q + b0 * p.q_stride[0] + b1 * p.q_stride[1] + row0 * p.q_stride[2];
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t t = 0; t < p.d; ++t) q[r * p.d + t] = f32_to_bf16(q_in[r * p.q_stride[2] + t * p.q_stride[3]] * p.scale);
  std::fill_n(max, rows, -std::numeric_limits<float>::infinity());
  std::fill_n(sum, rows, 0.0f);
  const int i = rows == rows_ ? 0 : 1;
  const float* mask =
      p.mask ? p.mask + b0 * p.mask_stride[0] + b1 * p.mask_stride[1] + row0 * p.mask_stride[2] : nullptr;
  for (int64_t key0 = 0; key0 < p.sk; key0 += keys_) {
    const int64_t keys = std::min(keys_, p.sk - key0);
    const int j = keys == keys_ ? 0 : 1;
    if (!scores_[i][j]->execute(streams_[size_t(thread)], thread, q, kt + key0, s, dnnl_scratch)) return false;
    if (mask)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < keys; ++c) s[r * keys_ + c] += mask[r * p.mask_stride[2] + (key0 + c) * p.mask_stride[3]];
    attention_simd::online_softmax_rows(s, rows, keys, keys_, max, sum, alpha);
    for (int64_t r = 0; r < rows; ++r) round_to_bf16(s + r * keys_, pr + r * keys_, keys, false);
    if (!values_[i][j]->execute(streams_[size_t(thread)], thread, pr, v + key0 * p.dv, o_block, dnnl_scratch))
      return false;
    for (int64_t r = 0; r < rows; ++r) {
      float* out = o + r * p.dv;
      const float* add = o_block + r * p.dv;
      if (key0 == 0) std::copy(add, add + p.dv, out);
      else
        for (int64_t e = 0; e < p.dv; ++e) out[e] = out[e] * alpha[r] + add[e];
    }
  }
  float* y = p.y + b0 * p.y_stride[0] + b1 * p.y_stride[1] + row0 * p.y_stride[2];
  for (int64_t r = 0; r < rows; ++r) {
    // Every score -inf, or a NaN among them: NaN, as softmax gives.
    const float inv = std::isfinite(max[r]) ? 1.0f / sum[r] : std::numeric_limits<float>::quiet_NaN();
    for (int64_t e = 0; e < p.dv; ++e) y[r * p.y_stride[2] + e * p.y_stride[3]] = o[r * p.dv + e] * inv;
  }
  return true;
}

Status Bf16Attention::run(const attention_simd::Problem& p, void* scratch) {
  char* base = static_cast<char*>(scratch);
  const Layout l{p.d, p.dv, p.sk, rows_, keys_};
  const int64_t heads = p.b0 * p.b1;
  // Kᵀ [d, sk] and V [sk, dv] of each head, rounded to bf16, side by side.
  parallel_for(heads * p.sk, heads * p.sk * (p.d + p.dv) >= kParallelMinElements, [&](int64_t task) {
    const int64_t batch = task / p.sk, key = task % p.sk, b0 = batch / p.b1, b1 = batch % p.b1;
    bf16* kt = reinterpret_cast<bf16*>(base + size_t(batch) * (l.k_bytes() + l.v_bytes()));
    bf16* v = kt + p.sk * p.d;
    const float* k_in = p.k + b0 * p.k_stride[0] + b1 * p.k_stride[1] + key * p.k_stride[3];
    const float* v_in = p.v + b0 * p.v_stride[0] + b1 * p.v_stride[1] + key * p.v_stride[2];
    for (int64_t t = 0; t < p.d; ++t) kt[t * p.sk + key] = f32_to_bf16(k_in[t * p.k_stride[2]]);
    for (int64_t e = 0; e < p.dv; ++e) v[key * p.dv + e] = f32_to_bf16(v_in[e * p.v_stride[3]]);
  });
  const int64_t tiles = (p.sq + rows_ - 1) / rows_;
  // Each tile on one thread, oneDNN single-threaded inside (it runs
  // sequentially when called in a parallel region); a lone tile gets every
  // thread through oneDNN instead. More threads than create() made slots
  // for: one at a time.
  const bool parallel = heads * tiles > 1 && threads_ > 1 && omp_get_max_threads() <= threads_;
  std::atomic<bool> failed = false;
  parallel_for(heads * tiles, parallel, [&](int64_t task) {
    if (!attend(p, task / tiles, task % tiles * rows_, parallel ? omp_get_thread_num() : 0, base)) failed = true;
  });
  if (failed) return internal_error("bf16 attention: oneDNN execution failed");
  return ok_status();
}

}  // namespace kiln
