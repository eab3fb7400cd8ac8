// CPU kernels for the fused ops: one pass over memory where the unfused
// subgraph made several (Highway loops, chosen per CPU at run time).
#include <algorithm>

#include "kernels/cpu/elementwise_simd.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/reduction_simd.h"
#include "kernels/kernel.h"

namespace kiln {

namespace {

// Elementwise in chunks, so a large tensor spreads over the threads.
Status unary_f32(KernelContext& ctx, simd::UnaryF32 op, simd::UnaryF32Params params = {}) {
  const TensorView& x = *ctx.input(0);
  if (x.dtype != DType::kF32) return ctx.unsupported_error("dtype {}", dtype_name(x.dtype));
  const float* in = x.as<float>();
  float* out = ctx.output(0)->as<float>();
  parallel_ranges(x.numel(), x.numel() >= kParallelMinElements, [&](int64_t begin, int64_t end) {
    simd::unary_f32(op, in + begin, out + begin, size_t(end - begin), params);
  });
  return ok_status();
}

}  // namespace

Status cpu_Gelu(KernelContext& ctx) {
  const std::string form = ctx.attrs().get_string("approximate", "none");
  if (form == "tanh") return unary_f32(ctx, simd::UnaryF32::kGeluTanh);
  if (form == "sigmoid") return unary_f32(ctx, simd::UnaryF32::kSilu, {.alpha = 1.702f});
  return unary_f32(ctx, simd::UnaryF32::kGelu);
}

// Per row: the GELU of the gate half straight into the output, then times
// the value half; both passes over a row that is still in cache.
Status cpu_Geglu(KernelContext& ctx) {
  const TensorView& x = *ctx.input(0);
  if (x.dtype != DType::kF32) return ctx.unsupported_error("dtype {}", dtype_name(x.dtype));
  const simd::UnaryF32 gelu =
      ctx.attrs().get_string("approximate", "none") == "tanh" ? simd::UnaryF32::kGeluTanh : simd::UnaryF32::kGelu;
  const int64_t half = x.shape.back() / 2, rows = half ? ctx.output(0)->numel() / half : 0;
  const float* in = x.as<float>();
  float* out = ctx.output(0)->as<float>();
  parallel_for(rows, rows * half >= kParallelMinElements, [&](int64_t r) {
    float* y = out + r * half;
    simd::unary_f32(gelu, in + r * 2 * half + half, y, size_t(half));
    simd::binary_f32(simd::BinaryF32::kMul, y, 1, in + r * 2 * half, 1, y, size_t(half));
  });
  return ok_status();
}

Status cpu_Silu(KernelContext& ctx) {
  return unary_f32(ctx, simd::UnaryF32::kSilu, {.alpha = ctx.attrs().get_float("alpha", 1.0f)});
}

Status cpu_GroupNorm(KernelContext& ctx) {
  const TensorView& x = *ctx.input(0);
  if (x.dtype != DType::kF32) return ctx.unsupported_error("dtype {}", dtype_name(x.dtype));
  const int64_t groups = ctx.attrs().get_int("num_groups", 1);
  const int64_t batch = x.shape[0], channels = x.shape[1];
  if (x.numel() == 0) return ok_status();
  reduction_simd::group_norm_rows(x.as<float>(), ctx.output(0)->as<float>(), batch * groups, channels / groups,
                                  x.numel() / (batch * channels), channels, ctx.attrs().get_float("epsilon", 1e-5f),
                                  ctx.input(1)->as<float>(), ctx.input(2)->as<float>(),
                                  ctx.attrs().get_string("activation", "none") == "silu");
  return ok_status();
}

// Each sample's rows are a LayerNorm whose affine is that sample's
// modulation: one pass, where the unfused graph wrote the norm, the product
// and the sum.
Status cpu_ModulatedLayerNorm(KernelContext& ctx) {
  const TensorView& x = *ctx.input(0);
  if (x.dtype != DType::kF32) return ctx.unsupported_error("dtype {}", dtype_name(x.dtype));
  const int64_t samples = x.shape[0], rows = x.shape[1], c = x.shape[2];
  const TensorView &scale = *ctx.input(1), &shift = *ctx.input(2);
  const reduction_simd::RowAffine affine{.scale = scale.as<float>(),
                                         .bias = shift.as<float>(),
                                         .rows_per_step = std::max<int64_t>(rows, 1),
                                         .scale_step = scale.numel() == c ? 0 : c,
                                         .bias_step = shift.numel() == c ? 0 : c};
  reduction_simd::layer_norm_rows(x.as<float>(), ctx.output(0)->as<float>(), samples * rows, c,
                                  ctx.attrs().get_float("epsilon", 1e-5f), affine, nullptr, nullptr);
  return ok_status();
}

Status cpu_RmsNorm(KernelContext& ctx) {
  const TensorView& x = *ctx.input(0);
  if (x.dtype != DType::kF32) return ctx.unsupported_error("dtype {}", dtype_name(x.dtype));
  const int64_t rank = x.rank(), axis = (ctx.attrs().get_int("axis", -1) + rank) % rank;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x.shape[d];
  for (int64_t d = axis + 1; d < rank; ++d) inner *= x.shape[d];
  if (x.numel() == 0) return ok_status();
  reduction_simd::rms_norm(x.as<float>(), ctx.output(0)->as<float>(), outer, x.shape[axis], inner,
                           ctx.attrs().get_float("epsilon", 1e-6f), ctx.input(1)->as<float>(),
                           ctx.attrs().get_string("activation", "none") == "silu");
  return ok_status();
}

// Each token's pairs turn by that token's angles, every head alike. Plain
// loops: the compiler vectorizes them, and the op is a small share of a
// transformer's time next to its products.
Status cpu_Rope(KernelContext& ctx) {
  const TensorView& x = *ctx.input(0);
  if (x.dtype != DType::kF32) return ctx.unsupported_error("dtype {}", dtype_name(x.dtype));
  const int64_t tokens = x.shape[1], width = x.shape[2], pairs = ctx.input(1)->shape[1];
  const float *cos = ctx.input(1)->as<float>(), *sin = ctx.input(2)->as<float>(), *in = x.as<float>();
  float* out = ctx.output(0)->as<float>();
  parallel_for(x.shape[0] * tokens, x.numel() >= kParallelMinElements, [&](int64_t row) {
    const float *c = cos + row % tokens * pairs, *s = sin + row % tokens * pairs;
    const float* from = in + row * width;
    float* to = out + row * width;
    for (int64_t head = 0; head < width; head += 2 * pairs)
      for (int64_t j = 0; j < pairs; ++j) {
        const float even = from[head + 2 * j], odd = from[head + 2 * j + 1];
        to[head + 2 * j] = even * c[j] - odd * s[j];
        to[head + 2 * j + 1] = even * s[j] + odd * c[j];
      }
  });
  return ok_status();
}

}  // namespace kiln
