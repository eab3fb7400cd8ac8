// What the kernels of linalg.cc and conv.cc share around kiln's GEMM
// (gemm.h): kernel scratch, constant weights packed once into a plan step's
// state, the fused epilogue (bias, activation, residual) and A operands
// rounded to bf16 rows for the GEMM's bf16 products.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/dtype.h"
#include "core/huge_pages.h"
#include "kernels/cpu/gemm.h"
#include "kernels/kernel.h"

namespace kiln::linalg {

// Below this many multiply-adds a loop is not worth an OpenMP team.
constexpr int64_t kParallelWork = int64_t(1) << 16;

// An error unless every input is f32 and the kernel has its CPU context.
Status require_f32(const KernelContext& ctx);

// True when a plan step records its first call (and may pack input `index`,
// a constant weight, once into its state: the layout a oneDNN primitive
// prefers, or the GEMM's panels).
bool recording(const KernelContext& ctx);
bool packs_weight(const KernelContext& ctx, size_t index);

// Kernel scratch for `what` (named in the error when there is none).
Result<void*> scratch_bytes(KernelContext& ctx, size_t bytes, std::string_view what);
Result<float*> scratch_floats(KernelContext& ctx, int64_t count, std::string_view what);

void fill_zero(TensorView& y);

// dst viewed through dst_strides = src viewed through src_strides, over `dims`.
void copy_strided(const float* src, const Shape& src_strides, float* dst, const Shape& dst_strides,
                  const Shape& dims);

// A constant B operand packed once by a plan step's first call (gemm.h):
// floats for f32 products, bf16 for bf16 ones.
template <typename T>
struct PackedOperand final : KernelState {
  T* data = nullptr;
  size_t count = 0;
  size_t index = 0;  // the input it is a copy of
  ~PackedOperand() override { std::free(data); }
  size_t owned_bytes() const override { return count * sizeof(T); }
  bool copies_input(size_t i) const override { return i == index; }
};

// gemm's packing for each type of product, whole panels on each of the
// threads where B is large enough.
int64_t packed_count(const float*, int64_t k, int64_t n);
int64_t packed_count(const bf16*, int64_t k, int64_t n);
void pack_as(const float* b, int64_t row_stride, int64_t col_stride, int64_t k, int64_t n, float* packed,
             float scale);
void pack_as(const float* b, int64_t row_stride, int64_t col_stride, int64_t k, int64_t n, bf16* packed,
             float scale);

// `count` values (64-byte aligned) for `owner`, a plan step's copy of
// constant input `index`.
template <typename T>
Status allocate_owned(const KernelContext& ctx, PackedOperand<T>& owner, size_t index, size_t count) {
  owner.count = count;
  owner.index = index;
  owner.data = static_cast<T*>(allocate_huge(count * sizeof(T)));
  if (!owner.data) return resource_exhausted("{}: no memory for its copy of input {}", node_label(*ctx.node), index);
  return ok_status();
}

// Packs B (element (t, j) at b[t * row_stride + j * col_stride], times
// `scale`) into `owner`'s own buffer: a plan step's copy of constant input
// `index`.
template <typename T>
Status pack_owned(const KernelContext& ctx, PackedOperand<T>& owner, size_t index, const float* b,
                  int64_t row_stride, int64_t col_stride, int64_t k, int64_t n, float scale = 1.0f) {
  KILN_RETURN_IF_ERROR(allocate_owned(ctx, owner, index, size_t(packed_count(owner.data, k, n))));
  pack_as(b, row_stride, col_stride, k, n, owner.data, scale);
  return ok_status();
}

// kiln.Linear's and kiln.Conv's epilogue: bias (input 2), activation,
// residual (input 3, shaped like the output).
gemm::Epilogue fused_epilogue(const KernelContext& ctx, bool bias_per_row);

// Scratch for one packed B per thread, for batches run side by side.
int64_t thread_slots();

}  // namespace kiln::linalg
