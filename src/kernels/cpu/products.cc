#include "kernels/cpu/products.h"

#include <omp.h>

#include <cstring>

#include "kernels/cpu/cpu_context.h"
#include "kernels/cpu/parallel.h"

namespace kiln::linalg {

Status require_f32(const KernelContext& ctx) {
  for (const TensorView* in : ctx.inputs)
    if (in && in->dtype != DType::kF32)
      return ctx.unsupported_error("dtype {} is not implemented", dtype_name(in->dtype));
  if (!ctx.cpu) return internal_error("{}: no CPU context", node_label(*ctx.node));
  return ok_status();
}

bool recording(const KernelContext& ctx) { return ctx.state && !*ctx.state; }
bool packs_weight(const KernelContext& ctx, size_t index) {
  return recording(ctx) && index < ctx.node->inputs.size() && ctx.node->inputs[index] &&
         ctx.node->inputs[index]->constant;
}

Result<void*> scratch_bytes(KernelContext& ctx, size_t bytes, std::string_view what) {
  void* p = ctx.workspace->scratch(bytes);
  if (!p) return resource_exhausted("{}: no scratch for {}", node_label(*ctx.node), what);
  return p;
}

Result<float*> scratch_floats(KernelContext& ctx, int64_t count, std::string_view what) {
  KILN_ASSIGN_OR_RETURN(void* p, scratch_bytes(ctx, size_t(count) * sizeof(float), what));
  return static_cast<float*>(p);
}

void fill_zero(TensorView& y) { std::memset(y.data, 0, y.nbytes()); }

void copy_strided(const float* src, const Shape& src_strides, float* dst, const Shape& dst_strides,
                  const Shape& dims) {
  const int64_t count = shape_numel(dims);
  if (count == 0) return;
  const size_t rank = dims.size();
  const int64_t inner = rank ? dims.back() : 1;
  const int64_t src_inner = rank ? src_strides.back() : 0, dst_inner = rank ? dst_strides.back() : 0;
  parallel_for(count / inner, count > kParallelWork, [&](int64_t row) {
    int64_t src_offset = 0, dst_offset = 0;
    for (int64_t rest = row, d = int64_t(rank) - 1; d-- > 0; rest /= dims[size_t(d)]) {
      src_offset += rest % dims[size_t(d)] * src_strides[size_t(d)];
      dst_offset += rest % dims[size_t(d)] * dst_strides[size_t(d)];
    }
    for (int64_t i = 0; i < inner; ++i) dst[dst_offset + i * dst_inner] = src[src_offset + i * src_inner];
  });
}

int64_t packed_count(const float*, int64_t k, int64_t n) { return gemm::packed_floats(k, n); }

int64_t packed_count(const bf16*, int64_t k, int64_t n) { return gemm::packed_bf16_count(k, n); }

namespace {

// Packs B's panels on the threads, whole panels each (a panel's packed
// values lie together, `per_panel` of them).
template <typename T, typename PackFn>
void pack_panels(const float* b, int64_t col_stride, int64_t k, int64_t n, T* packed, int64_t per_panel,
                 PackFn&& pack) {
  const int64_t w = gemm::panel_width(), panels = (n + w - 1) / w;
  parallel_ranges(panels, panels > 1 && k * n >= kParallelMinElements, [&](int64_t first, int64_t last) {
    const int64_t j0 = first * w;
    pack(b + j0 * col_stride, std::min(n, last * w) - j0, packed + first * per_panel);
  });
}

}  // namespace

void pack_as(const float* b, int64_t row_stride, int64_t col_stride, int64_t k, int64_t n, float* packed,
             float scale) {
  pack_panels(b, col_stride, k, n, packed, gemm::packed_floats(k, gemm::panel_width()),
              [&](const float* from, int64_t cols, float* to) {
                gemm::pack(from, row_stride, col_stride, k, cols, to, scale);
              });
}

void pack_as(const float* b, int64_t row_stride, int64_t col_stride, int64_t k, int64_t n, bf16* packed,
             float scale) {
  pack_panels(b, col_stride, k, n, packed, gemm::packed_bf16_count(k, gemm::panel_width()),
              [&](const float* from, int64_t cols, bf16* to) {
                gemm::pack_bf16(from, row_stride, col_stride, k, cols, to, scale);
              });
}

gemm::Epilogue fused_epilogue(const KernelContext& ctx, bool bias_per_row) {
  gemm::Epilogue e;
  if (const TensorView* bias = ctx.input(2)) e.bias = bias->as<float>();
  e.bias_per_row = bias_per_row;
  if (ctx.node->op == OpKind::kLinear || ctx.node->op == OpKind::kFusedConv) {
    const std::string act = ctx.attrs().get_string("activation", "none");
    e.activate = act != "none";
    e.activation = act == "gelu"        ? simd::UnaryF32::kGelu
                   : act == "gelu_tanh" ? simd::UnaryF32::kGeluTanh
                   : act == "swish"     ? simd::UnaryF32::kSilu
                                        : simd::UnaryF32::kRelu;
    if (act == "swish") e.params.alpha = ctx.attrs().get_float("alpha", 1.0f);
    if (const TensorView* residual = ctx.input(3)) e.residual = residual->as<float>();
  }
  return e;
}

int64_t thread_slots() { return omp_get_max_threads(); }

}  // namespace kiln::linalg
