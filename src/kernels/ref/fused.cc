// Reference kernels for the fused ops: each computes, in double, exactly the
// unfused subgraph its fusion pass replaces.
#include <cmath>

#include "kernels/kernel.h"

namespace kiln {

namespace {

template <typename Fn>
Status map_f32(KernelContext& ctx, Fn&& fn) {
  const TensorView& x = *ctx.input(0);
  if (x.dtype != DType::kF32) return ctx.unsupported_error("dtype {}", dtype_name(x.dtype));
  const float* in = x.as<float>();
  float* out = ctx.output(0)->as<float>();
  for (int64_t i = 0; i < x.numel(); ++i) out[i] = float(fn(double(in[i])));
  return ok_status();
}

double sigmoid(double v) { return 1 / (1 + std::exp(-v)); }

}  // namespace

Status ref_Gelu(KernelContext& ctx) {
  const std::string form = ctx.attrs().get_string("approximate", "none");
  if (form == "tanh")
    return map_f32(ctx, [](double v) {
      return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
    });
  if (form == "sigmoid") return map_f32(ctx, [](double v) { return v * sigmoid(1.702 * v); });
  return map_f32(ctx, [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); });
}

Status ref_Geglu(KernelContext& ctx) {
  const TensorView& x = *ctx.input(0);
  if (x.dtype != DType::kF32) return ctx.unsupported_error("dtype {}", dtype_name(x.dtype));
  const bool tanh_form = ctx.attrs().get_string("approximate", "none") == "tanh";
  const int64_t half = x.shape.back() / 2, rows = half ? ctx.output(0)->numel() / half : 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < half; ++j) {
      const double a = x.as<float>()[r * 2 * half + j], g = x.as<float>()[r * 2 * half + half + j];
      const double gelu = tanh_form ? 0.5 * g * (1 + std::tanh(std::sqrt(2 / M_PI) * (g + 0.044715 * g * g * g)))
                                    : 0.5 * g * (1 + std::erf(g / std::sqrt(2.0)));
      ctx.output(0)->as<float>()[r * half + j] = float(a * gelu);
    }
  return ok_status();
}

Status ref_Silu(KernelContext& ctx) {
  const double alpha = ctx.attrs().get_float("alpha", 1.0f);
  return map_f32(ctx, [alpha](double v) { return v * sigmoid(alpha * v); });
}

Status ref_GroupNorm(KernelContext& ctx) {
  const TensorView& x = *ctx.input(0);
  if (x.dtype != DType::kF32) return ctx.unsupported_error("dtype {}", dtype_name(x.dtype));
  const int64_t groups = ctx.attrs().get_int("num_groups", 1);
  const double eps = ctx.attrs().get_float("epsilon", 1e-5f);
  const bool silu = ctx.attrs().get_string("activation", "none") == "silu";
  const int64_t batch = x.shape[0], channels = x.shape[1];
  const int64_t spatial = batch * channels != 0 ? x.numel() / (batch * channels) : 0;
  const int64_t per_group = channels / groups * spatial;
  const float *in = x.as<float>(), *scale = ctx.input(1)->as<float>(), *bias = ctx.input(2)->as<float>();
  float* out = ctx.output(0)->as<float>();
  for (int64_t row = 0; row < batch * groups; ++row) {
    const int64_t begin = row * per_group;
    double mean = 0, var = 0;
    for (int64_t j = 0; j < per_group; ++j) mean += in[begin + j];
    mean /= double(per_group);
    for (int64_t j = 0; j < per_group; ++j) var += (in[begin + j] - mean) * (in[begin + j] - mean);
    var /= double(per_group);
    const double inv_std = 1 / std::sqrt(var + eps);
    for (int64_t j = 0; j < per_group; ++j) {
      const int64_t c = (begin + j) / spatial % channels;
      double v = (in[begin + j] - mean) * inv_std * scale[c] + bias[c];
      out[begin + j] = float(silu ? v * sigmoid(v) : v);
    }
  }
  return ok_status();
}

Status ref_ModulatedLayerNorm(KernelContext& ctx) {
  const TensorView& x = *ctx.input(0);
  if (x.dtype != DType::kF32) return ctx.unsupported_error("dtype {}", dtype_name(x.dtype));
  const double eps = ctx.attrs().get_float("epsilon", 1e-5f);
  const int64_t samples = x.shape[0], rows = x.shape[1], c = x.shape[2];
  const TensorView &scale = *ctx.input(1), &shift = *ctx.input(2);
  for (int64_t b = 0; b < samples; ++b)
    for (int64_t r = 0; r < rows; ++r) {
      const float* in = x.as<float>() + (b * rows + r) * c;
      float* out = ctx.output(0)->as<float>() + (b * rows + r) * c;
      double mean = 0, var = 0;
      for (int64_t j = 0; j < c; ++j) mean += in[j];
      mean /= double(c);
      for (int64_t j = 0; j < c; ++j) var += (in[j] - mean) * (in[j] - mean);
      const double inv_std = 1 / std::sqrt(var / double(c) + eps);
      const float* m = scale.as<float>() + (scale.numel() == c ? 0 : b * c);
      const float* s = shift.as<float>() + (shift.numel() == c ? 0 : b * c);
      for (int64_t j = 0; j < c; ++j) out[j] = float((in[j] - mean) * inv_std * m[j] + s[j]);
    }
  return ok_status();
}

Status ref_RmsNorm(KernelContext& ctx) {
  const TensorView& x = *ctx.input(0);
  if (x.dtype != DType::kF32) return ctx.unsupported_error("dtype {}", dtype_name(x.dtype));
  const int64_t rank = x.rank(), axis = (ctx.attrs().get_int("axis", -1) + rank) % rank;
  const double eps = ctx.attrs().get_float("epsilon", 1e-6f);
  const bool silu = ctx.attrs().get_string("activation", "none") == "silu";
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x.shape[d];
  for (int64_t d = axis + 1; d < rank; ++d) inner *= x.shape[d];
  const int64_t c = x.shape[axis];
  const float *in = x.as<float>(), *scale = ctx.input(1)->as<float>();
  float* out = ctx.output(0)->as<float>();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      const int64_t base = o * c * inner + i;
      double sum = 0;
      for (int64_t j = 0; j < c; ++j) sum += double(in[base + j * inner]) * in[base + j * inner];
      const double inv = 1 / std::sqrt(sum / double(c) + eps);
      for (int64_t j = 0; j < c; ++j) {
        const double v = in[base + j * inner] * inv * scale[j];
        out[base + j * inner] = float(silu ? v * sigmoid(v) : v);
      }
    }
  return ok_status();
}

Status ref_Rope(KernelContext& ctx) {
  const TensorView& x = *ctx.input(0);
  if (x.dtype != DType::kF32) return ctx.unsupported_error("dtype {}", dtype_name(x.dtype));
  const int64_t batch = x.shape[0], tokens = x.shape[1], width = x.shape[2], pairs = ctx.input(1)->shape[1];
  const float *cos = ctx.input(1)->as<float>(), *sin = ctx.input(2)->as<float>();
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = 0; s < tokens; ++s) {
      const float* in = x.as<float>() + (b * tokens + s) * width;
      float* out = ctx.output(0)->as<float>() + (b * tokens + s) * width;
      for (int64_t p = 0; p < width / 2; ++p) {
        const double c = cos[s * pairs + p % pairs], n = sin[s * pairs + p % pairs];
        const double even = in[2 * p], odd = in[2 * p + 1];
        out[2 * p] = float(even * c - odd * n);
        out[2 * p + 1] = float(even * n + odd * c);
      }
    }
  return ok_status();
}

}  // namespace kiln
