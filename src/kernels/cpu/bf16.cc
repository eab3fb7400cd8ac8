#include "kernels/cpu/bf16.h"

#include <oneapi/dnnl/dnnl.hpp>

#include "kernels/cpu/parallel.h"

namespace kiln {

void round_to_bf16(const float* x, bf16* dst, int64_t n, bool parallel) {
  parallel_ranges(n, parallel && n >= kParallelMinElements, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) dst[i] = f32_to_bf16(x[i]);
  });
}

void round_through_bf16(const float* x, float* dst, int64_t n, bool parallel) {
  parallel_ranges(n, parallel && n >= kParallelMinElements, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      dst[i] = bf16_to_f32(f32_to_bf16(x[i]));
    }
  });
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
