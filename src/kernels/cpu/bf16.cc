// round_to_bf16 and round_through_bf16 are Highway per-target loops (this
// file is compiled once per SIMD target; foreach_target.h re-includes it):
// compiled for the baseline x86-64 alone, f32_to_bf16's loop vectorized to
// SSE2 shuffles, and rounding the A operands of dit_small's bf16 Linears took
// 6.9 % of its perf samples (4.4 % so, most of it waiting on the loads).
#include "kernels/cpu/bf16.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/bf16.cc"
#include <hwy/foreach_target.h>  // must precede highway.h

#include <hwy/highway.h>

#include "kernels/cpu/bf16_round-inl.h"

HWY_BEFORE_NAMESPACE();
namespace kiln::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using simd::HWY_NAMESPACE::Bf16Bits;
using simd::HWY_NAMESPACE::StoreBf16;

void RoundToBf16(const float* x, bf16* dst, int64_t begin, int64_t end) {
  const hn::ScalableTag<float> d;
  const int64_t lanes = int64_t(hn::Lanes(d));
  int64_t i = begin;
  for (; i + lanes <= end; i += lanes) StoreBf16(d, hn::LoadU(d, x + i), dst + i);
  for (; i < end; ++i) dst[i] = f32_to_bf16(x[i]);
}

void RoundThroughBf16(const float* x, float* dst, int64_t begin, int64_t end) {
  const hn::ScalableTag<float> d;
  const int64_t lanes = int64_t(hn::Lanes(d));
  int64_t i = begin;
  for (; i + lanes <= end; i += lanes)
    hn::StoreU(hn::BitCast(d, hn::ShiftLeft<16>(Bf16Bits(d, hn::LoadU(d, x + i)))), d, dst + i);
  for (; i < end; ++i) dst[i] = bf16_to_f32(f32_to_bf16(x[i]));
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace kiln::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <oneapi/dnnl/dnnl.hpp>

#include "kernels/cpu/parallel.h"

namespace kiln {

HWY_EXPORT(RoundToBf16);
HWY_EXPORT(RoundThroughBf16);

void round_to_bf16(const float* x, bf16* dst, int64_t n, bool parallel) {
  parallel_ranges(n, parallel && n >= kParallelMinElements,
                  [&](int64_t begin, int64_t end) { HWY_DYNAMIC_DISPATCH(RoundToBf16)(x, dst, begin, end); });
}

void round_through_bf16(const float* x, float* dst, int64_t n, bool parallel) {
  parallel_ranges(n, parallel && n >= kParallelMinElements,
                  [&](int64_t begin, int64_t end) { HWY_DYNAMIC_DISPATCH(RoundThroughBf16)(x, dst, begin, end); });
}

Result<void*> rounded_copy(KernelContext& ctx, size_t index) {
  const TensorView& in = *ctx.input(index);
  const bool native = onednn_has_bf16();
  void* data = ctx.workspace ? ctx.workspace->scratch(size_t(in.numel()) * (native ? sizeof(bf16) : sizeof(float)))
                             : nullptr;
  if (!data) return resource_exhausted("{}: no scratch for a bf16 operand", node_label(*ctx.node));
  if (native) round_to_bf16(in.as<float>(), static_cast<bf16*>(data), in.numel(), true);
  else round_through_bf16(in.as<float>(), static_cast<float*>(data), in.numel(), true);
  return data;
}

bool onednn_has_bf16() {
  static const bool has = [] {
    try {
      using dnnl::memory;
      const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
      const memory::desc a({16, 16}, memory::data_type::bf16, memory::format_tag::ab);
      const memory::desc y({16, 16}, memory::data_type::f32, memory::format_tag::ab);
      dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, a, y), engine);
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return has;
}

}  // namespace kiln
#endif  // HWY_ONCE
