// cpu kernel for kiln.Attention (see kernels/kernel.h): flash attention, which
// never materializes the [Sq, Sk] scores; the loops are in attention_simd.cc.
//
// This file turns the node into strides. No operand is transposed: logical
// dim j of Qh has the stride of Q's dim q_perm[j] (likewise K and V), and O's
// dim i is written with the stride of Y's dim j where out_perm[j] == i. An
// operand with a slice attribute (q_slice = [axis, start, length], see
// fuse_qkv) starts `start` strides of its dim `axis` in and has `length`
// there. All
// index arrays are std::array of the rank bound 4: a compiled plan's replay
// must see no heap allocation from this kernel.
#include <omp.h>

#include <algorithm>
#include <array>

#include "ir/attention_attrs.h"
#include "kernels/cpu/attention_bf16.h"
#include "kernels/cpu/attention_simd.h"
#include "kernels/cpu/bf16.h"
#include "kernels/cpu/cpu_context.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/parallel.h"
#include "kernels/kernel.h"
#include "passes/pass.h"

namespace kiln {

namespace {

using attention_simd::Strides;

// A multiply-add of the tile loops costs far less than an elementwise op's
// element, so threads pay off only at this many.
constexpr double kParallelMinMacs = double(kParallelMinElements) * 16;

// Below this many keys, bf16 attention runs the f32 kernel, which is then
// faster: a bf16 task's blocks of scores are too short for its products to
// outweigh the rounding and packing around them (kiln_bench_attention:
// docs/performance.md#bf16-attention). Every CPU computes these nodes in
// f32, so results do not depend on the machine.
constexpr int64_t kBf16MinKeys = 64;

// Dims and strides of x right-aligned to rank 4: missing leading dims have
// size 1, and size-1 dims stride 0, which is also how a mask broadcasts.
struct Layout {
  std::array<int64_t, 4> dim{1, 1, 1, 1};
  Strides stride{};
};

Layout layout4(const TensorView& x) {
  Layout l;
  int64_t stride = 1;
  for (int64_t a = x.rank() - 1, k = 3; a >= 0; --a, --k) {
    l.dim[size_t(k)] = x.shape[size_t(a)];
    l.stride[size_t(k)] = x.shape[size_t(a)] == 1 ? 0 : stride;
    stride *= x.shape[size_t(a)];
  }
  return l;
}

// perm[j] counted in the rank-4 layout (identity when the attribute is absent).
int64_t perm_at(const std::vector<int64_t>* perm, int64_t rank, int64_t j) {
  return 4 - rank + (perm ? (*perm)[size_t(j)] : j);
}

// Transpose(x[slice], perm) as a layout over x's memory from x + *offset.
Layout transposed(const TensorView& x, const std::vector<int64_t>* perm, const std::vector<int64_t>* slice,
                  int64_t* offset) {
  Layout src = layout4(x);
  *offset = 0;
  if (slice) {
    const size_t axis = size_t(4 - x.rank() + (*slice)[0]);
    *offset = (*slice)[1] * src.stride[axis];
    src.dim[axis] = (*slice)[2];
  }
  Layout l = src;
  for (int64_t j = 0; j < x.rank(); ++j) {
    const size_t to = size_t(4 - x.rank() + j), from = size_t(perm_at(perm, x.rank(), j));
    l.dim[to] = src.dim[from];
    l.stride[to] = src.stride[from];
  }
  return l;
}

// Strides that write O's logical dims into y = Transpose(O, perm).
Strides output_strides(const TensorView& y, const std::vector<int64_t>* perm) {
  const Layout dst = layout4(y);
  Strides s = dst.stride;
  for (int64_t j = 0; j < y.rank(); ++j) s[size_t(perm_at(perm, y.rank(), j))] = dst.stride[size_t(4 - y.rank() + j)];
  return s;
}

attention_simd::Problem read_problem(const KernelContext& ctx) {
  const Attributes& a = ctx.attrs();
  int64_t q_offset, k_offset, v_offset;
  auto operand = [&](size_t i, int64_t* offset) {
    const attention_attrs::Operand& names = attention_attrs::kOperands[i];
    return transposed(*ctx.input(i), a.get_ints(names.perm), a.get_ints(names.slice), offset);
  };
  const Layout q = operand(0, &q_offset), k = operand(1, &k_offset), v = operand(2, &v_offset);
  attention_simd::Problem p;
  p.b0 = q.dim[0];
  p.b1 = q.dim[1];
  p.sq = q.dim[2];
  p.d = q.dim[3];
  p.sk = k.dim[3];
  p.dv = v.dim[3];
  p.scale = a.get_float(attention_attrs::kScale, 1.0f);
  p.q = ctx.input(0)->as<float>() + q_offset;
  p.k = ctx.input(1)->as<float>() + k_offset;
  p.v = ctx.input(2)->as<float>() + v_offset;
  p.q_stride = q.stride;
  p.k_stride = k.stride;
  p.v_stride = v.stride;
  if (const TensorView* mask = ctx.input(3)) {
    p.mask = mask->as<float>();
    p.mask_stride = layout4(*mask).stride;
  }
  p.y = ctx.output(0)->as<float>();
  p.y_stride = output_strides(*ctx.output(0), a.get_ints(attention_attrs::kOutPerm));
  return p;
}

// bf16 attention on kiln's GEMM (where gemm::has_bf16_products()).
Status run_bf16(KernelContext& ctx, const attention_simd::Problem& p) {
  const int threads = omp_get_max_threads();
  void* scratch = ctx.workspace ? ctx.workspace->scratch(attention_bf16::scratch_bytes(p, threads)) : nullptr;
  if (!scratch) return resource_exhausted("{}: no scratch for bf16 attention", node_label(*ctx.node));
  attention_bf16::attend(p, scratch, threads);
  return ok_status();
}

// On a CPU without bf16 products: the f32 kernel on copies of Q, K and V
// rounded through bf16 (kept f32), which the products of bf16 values give.
// Operands sliced from one input share its one copy.
Status round_operands_through_bf16(KernelContext& ctx, attention_simd::Problem& p) {
  const float** operands[] = {&p.q, &p.k, &p.v};
  const float* copies[3] = {};
  for (size_t i = 0; i < 3; ++i) {
    const TensorView& in = *ctx.input(i);
    const float* copy = nullptr;
    for (size_t j = 0; j < i; ++j)
      if (ctx.input(j)->data == in.data) copy = copies[j];
    if (!copy) {
      KILN_ASSIGN_OR_RETURN(copy, rounded_f32_copy(ctx, in.as<float>(), in.numel()));
    }
    copies[i] = copy;
    *operands[i] = copy + (*operands[i] - in.as<float>());
  }
  return ok_status();
}

}  // namespace

Status cpu_Attention(KernelContext& ctx) {
  for (size_t i = 0; i < ctx.inputs.size(); ++i)
    if (ctx.input(i) && ctx.input(i)->dtype != DType::kF32)
      return ctx.unsupported_error("input {} has dtype {}", i, dtype_name(ctx.input(i)->dtype));
  attention_simd::Problem p = read_problem(ctx);
  TensorView& y = *ctx.output(0);
  if (y.numel() == 0) return ok_status();
  if (p.sk == 0) {  // softmax over no keys weighs nothing: O = 0, as the unfused MatMul gives
    std::fill_n(p.y, y.numel(), 0.0f);
    return ok_status();
  }
  if (computes_in_bf16(*ctx.node) && p.sk >= kBf16MinKeys) {
    if (gemm::has_bf16_products()) return run_bf16(ctx, p);
    KILN_RETURN_IF_ERROR(round_operands_through_bf16(ctx, p));
  }
  const bool parallel = double(p.b0 * p.b1 * p.sq) * double(p.sk) * double(p.d + p.dv) >= kParallelMinMacs;
  const int64_t slots = parallel ? omp_get_max_threads() : 1;
  const size_t bytes = size_t(slots * attention_simd::scratch_floats(p)) * sizeof(float);
  void* scratch = ctx.workspace ? ctx.workspace->scratch(bytes) : nullptr;
  if (!scratch) return resource_exhausted("{}: no scratch for {} threads", node_label(*ctx.node), slots);
  attention_simd::attention_f32(p, static_cast<float*>(scratch), parallel);
  return ok_status();
}

}  // namespace kiln
