// Reference kernels for the elementwise ops: the test oracle only.
//
// One loop over output elements; each input element is found through its
// broadcast index. Floats are computed in double and rounded once to the
// output dtype; integers in 64-bit two's-complement arithmetic, wrapped to the
// output width. Integer edge cases follow the CPU kernels' documented rules:
// Div truncates toward zero with x/0 = 0, float->integer casts truncate toward
// zero and saturate with NaN -> 0.
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/kernel.h"

namespace kiln {

namespace {

// The element of `in` (broadcast to `out`) that output element `i` reads.
int64_t broadcast_index(const Shape& out, const Shape& in, int64_t i) {
  int64_t index = 0, stride = 1;
  for (size_t k = 0; k < in.size(); ++k) {
    const size_t d = in.size() - 1 - k;  // dims from the innermost
    const int64_t out_dim = out[out.size() - 1 - k];
    const int64_t coord = i % out_dim;
    i /= out_dim;
    if (in[d] != 1) index += coord * stride;
    stride *= in[d];
  }
  return index;
}

bool is_integer(DType d) { return !dtype_is_float(d); }  // bool counts as 0/1

double load_double(const TensorView& t, int64_t i) {
  return dtype_visit(t.dtype, [&](auto tag) -> double {
    using T = decltype(tag);
    const T v = t.as<const T>()[i];
    if constexpr (std::is_same_v<T, f16>) return f16_to_f32(v);
    else if constexpr (std::is_same_v<T, bf16>) return bf16_to_f32(v);
    else return double(v);
  });
}

int64_t load_int(const TensorView& t, int64_t i) {
  return dtype_visit(t.dtype, [&](auto tag) -> int64_t {
    using T = decltype(tag);
    if constexpr (std::is_integral_v<T>) return int64_t(t.as<const T>()[i]);
    else return 0;
  });
}

// Keeps the low bits, as two's-complement narrowing does.
void store_int(TensorView& t, int64_t i, int64_t v) {
  dtype_visit(t.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) t.as<T>()[i] = v != 0;
    else if constexpr (std::is_integral_v<T>) t.as<T>()[i] = T(v);
  });
}

// Truncates toward zero and saturates for integer dtypes; rounds for floats.
void store_double(TensorView& t, int64_t i, double v) {
  dtype_visit(t.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, f16>) {
      t.as<T>()[i] = f64_to_f16(v);
    } else if constexpr (std::is_same_v<T, bf16>) {
      t.as<T>()[i] = f32_to_bf16(float(v));
    } else if constexpr (std::is_same_v<T, bool>) {
      t.as<T>()[i] = v != 0;
    } else if constexpr (std::is_integral_v<T>) {
      constexpr double lo = double(std::numeric_limits<T>::min());
      constexpr double hi = double(std::numeric_limits<T>::max());
      if (std::isnan(v)) t.as<T>()[i] = 0;
      else if (v <= lo) t.as<T>()[i] = std::numeric_limits<T>::min();
      else if (v >= hi) t.as<T>()[i] = std::numeric_limits<T>::max();
      else t.as<T>()[i] = T(std::trunc(v));
    } else {
      t.as<T>()[i] = T(v);
    }
  });
}

uint64_t to_bits(int64_t v) { return uint64_t(v); }
int64_t from_bits(uint64_t v) { return int64_t(v); }

int64_t int_pow(int64_t base, int64_t e) {
  if (e < 0) return base == 1 ? 1 : base == -1 ? (e % 2 ? -1 : 1) : 0;  // 1/base^-e, truncated
  uint64_t result = 1, b = to_bits(base);
  for (uint64_t x = uint64_t(e); x; x >>= 1, b *= b)
    if (x & 1) result *= b;
  return from_bits(result);
}

using FloatFn = double (*)(double, double);
using IntFn = int64_t (*)(int64_t, int64_t);

// out[i] = f(in0[i], in1[i]) with broadcasting: in int64 when both inputs are
// integers, else in double (Pow's exponent may have another dtype).
Status ref_broadcast(KernelContext& ctx, FloatFn ff, IntFn fi) {
  TensorView& y = *ctx.output(0);
  const TensorView& a = *ctx.input(0);
  const TensorView& b = *ctx.input(1);
  for (int64_t i = 0; i < y.numel(); ++i) {
    const int64_t ia = broadcast_index(y.shape, a.shape, i);
    const int64_t ib = broadcast_index(y.shape, b.shape, i);
    if (is_integer(a.dtype) && is_integer(b.dtype))
      store_int(y, i, fi(load_int(a, ia), load_int(b, ib)));
    else
      store_double(y, i, ff(load_double(a, ia), load_double(b, ib)));
  }
  return ok_status();
}

// out[i] = f(in[i]).
Status ref_map(KernelContext& ctx, FloatFn ff, IntFn fi, double param = 0) {
  TensorView& y = *ctx.output(0);
  const TensorView& x = *ctx.input(0);
  for (int64_t i = 0; i < y.numel(); ++i) {
    if (!is_integer(x.dtype)) {
      store_double(y, i, ff(load_double(x, i), param));
    } else {
      if (!fi) return ctx.unsupported_error("integer input");
      store_int(y, i, fi(load_int(x, i), 0));
    }
  }
  return ok_status();
}

double min_nan(double a, double b) { return a < b || std::isnan(a) ? a : b; }
double max_nan(double a, double b) { return a > b || std::isnan(a) ? a : b; }

Status ref_variadic(KernelContext& ctx, FloatFn ff, IntFn fi) {
  TensorView& y = *ctx.output(0);
  const TensorView& first = *ctx.input(0);
  for (int64_t i = 0; i < y.numel(); ++i) {
    const int64_t i0 = broadcast_index(y.shape, first.shape, i);
    double fv = load_double(first, i0);
    int64_t iv = load_int(first, i0);
    for (size_t k = 1; k < ctx.inputs.size(); ++k) {
      const TensorView& in = *ctx.input(k);
      const int64_t ik = broadcast_index(y.shape, in.shape, i);
      fv = ff(fv, load_double(in, ik));
      iv = fi(iv, load_int(in, ik));
    }
    if (is_integer(y.dtype)) store_int(y, i, iv);
    else store_double(y, i, fv);
  }
  return ok_status();
}

Status ref_copy(KernelContext& ctx) {
  const TensorView& x = *ctx.input(0);
  TensorView& y = *ctx.output(0);
  if (y.data != x.data && x.nbytes() > 0) std::memcpy(y.data, x.data, x.nbytes());
  return ok_status();
}

}  // namespace

Status ref_Add(KernelContext& ctx) {
  return ref_broadcast(ctx, [](double a, double b) { return a + b; },
                       [](int64_t a, int64_t b) { return from_bits(to_bits(a) + to_bits(b)); });
}
Status ref_Sub(KernelContext& ctx) {
  return ref_broadcast(ctx, [](double a, double b) { return a - b; },
                       [](int64_t a, int64_t b) { return from_bits(to_bits(a) - to_bits(b)); });
}
Status ref_Mul(KernelContext& ctx) {
  return ref_broadcast(ctx, [](double a, double b) { return a * b; },
                       [](int64_t a, int64_t b) { return from_bits(to_bits(a) * to_bits(b)); });
}
Status ref_Div(KernelContext& ctx) {
  return ref_broadcast(ctx, [](double a, double b) { return a / b; }, [](int64_t a, int64_t b) {
    if (b == 0) return int64_t(0);
    if (b == -1) return from_bits(0 - to_bits(a));  // INT64_MIN / -1 wraps
    return a / b;
  });
}
Status ref_Min(KernelContext& ctx) {
  return ref_variadic(ctx, min_nan, [](int64_t a, int64_t b) { return a < b ? a : b; });
}
Status ref_Max(KernelContext& ctx) {
  return ref_variadic(ctx, max_nan, [](int64_t a, int64_t b) { return a > b ? a : b; });
}

Status ref_Pow(KernelContext& ctx) {
  return ref_broadcast(ctx, [](double a, double b) { return std::pow(a, b); }, int_pow);
}

Status ref_Equal(KernelContext& ctx) {
  return ref_broadcast(ctx, [](double a, double b) { return double(a == b); },
                       [](int64_t a, int64_t b) { return int64_t(a == b); });
}
Status ref_Less(KernelContext& ctx) {
  return ref_broadcast(ctx, [](double a, double b) { return double(a < b); },
                       [](int64_t a, int64_t b) { return int64_t(a < b); });
}
Status ref_Greater(KernelContext& ctx) {
  return ref_broadcast(ctx, [](double a, double b) { return double(a > b); },
                       [](int64_t a, int64_t b) { return int64_t(a > b); });
}

Status ref_Sqrt(KernelContext& ctx) {
  return ref_map(ctx, [](double v, double) { return std::sqrt(v); }, nullptr);
}
Status ref_Reciprocal(KernelContext& ctx) {
  return ref_map(ctx, [](double v, double) { return 1 / v; }, nullptr);
}
Status ref_Neg(KernelContext& ctx) {
  return ref_map(ctx, [](double v, double) { return -v; },
                 [](int64_t v, int64_t) { return from_bits(0 - to_bits(v)); });
}
Status ref_Abs(KernelContext& ctx) {
  return ref_map(ctx, [](double v, double) { return std::abs(v); },
                 [](int64_t v, int64_t) { return v < 0 ? from_bits(0 - to_bits(v)) : v; });
}
Status ref_Exp(KernelContext& ctx) {
  return ref_map(ctx, [](double v, double) { return std::exp(v); }, nullptr);
}
Status ref_Log(KernelContext& ctx) {
  return ref_map(ctx, [](double v, double) { return std::log(v); }, nullptr);
}
Status ref_Erf(KernelContext& ctx) {
  return ref_map(ctx, [](double v, double) { return std::erf(v); }, nullptr);
}
Status ref_Tanh(KernelContext& ctx) {
  return ref_map(ctx, [](double v, double) { return std::tanh(v); }, nullptr);
}
Status ref_Sigmoid(KernelContext& ctx) {
  return ref_map(ctx, [](double v, double) { return 1 / (1 + std::exp(-v)); }, nullptr);
}
Status ref_Relu(KernelContext& ctx) {
  return ref_map(ctx, [](double v, double) { return v < 0 ? 0.0 : v; },
                 [](int64_t v, int64_t) { return v < 0 ? int64_t(0) : v; });
}
Status ref_LeakyRelu(KernelContext& ctx) {
  const double alpha = ctx.attrs().get_float("alpha", 0.01f);
  return ref_map(ctx, [](double v, double a) { return v < 0 ? v * a : v; }, nullptr, alpha);
}
Status ref_Cos(KernelContext& ctx) {
  return ref_map(ctx, [](double v, double) { return std::cos(v); }, nullptr);
}
Status ref_Sin(KernelContext& ctx) {
  return ref_map(ctx, [](double v, double) { return std::sin(v); }, nullptr);
}

// Absent bounds do not clip; lo > hi gives hi everywhere (ONNX).
Status ref_Clip(KernelContext& ctx) {
  const TensorView& x = *ctx.input(0);
  TensorView& y = *ctx.output(0);
  const TensorView* lo = ctx.input(1);
  const TensorView* hi = ctx.input(2);
  for (int64_t i = 0; i < y.numel(); ++i) {
    if (is_integer(x.dtype)) {
      int64_t v = load_int(x, i);
      if (lo && v < load_int(*lo, 0)) v = load_int(*lo, 0);
      if (hi && v > load_int(*hi, 0)) v = load_int(*hi, 0);
      store_int(y, i, v);
    } else {
      double v = load_double(x, i);
      if (lo && v < load_double(*lo, 0)) v = load_double(*lo, 0);
      if (hi && v > load_double(*hi, 0)) v = load_double(*hi, 0);
      store_double(y, i, v);
    }
  }
  return ok_status();
}

Status ref_Where(KernelContext& ctx) {
  const TensorView& c = *ctx.input(0);
  TensorView& y = *ctx.output(0);
  const size_t size = dtype_size(y.dtype);
  for (int64_t i = 0; i < y.numel(); ++i) {
    const bool pick_x = load_int(c, broadcast_index(y.shape, c.shape, i)) != 0;
    const TensorView& src = *ctx.input(pick_x ? 1 : 2);
    const int64_t j = broadcast_index(y.shape, src.shape, i);
    std::memcpy(static_cast<char*>(y.data) + size_t(i) * size,
                static_cast<const char*>(src.data) + size_t(j) * size, size);
  }
  return ok_status();
}

Status ref_Not(KernelContext& ctx) {
  for (int64_t i = 0; i < ctx.output(0)->numel(); ++i)
    store_int(*ctx.output(0), i, load_int(*ctx.input(0), i) == 0);
  return ok_status();
}

Status ref_Cast(KernelContext& ctx) {
  const TensorView& x = *ctx.input(0);
  TensorView& y = *ctx.output(0);
  for (int64_t i = 0; i < y.numel(); ++i) {
    if (is_integer(x.dtype)) {
      if (is_integer(y.dtype)) store_int(y, i, load_int(x, i));
      else store_double(y, i, double(load_int(x, i)));
    } else {
      store_double(y, i, load_double(x, i));
    }
  }
  return ok_status();
}

Status ref_Identity(KernelContext& ctx) { return ref_copy(ctx); }

Status ref_Dropout(KernelContext& ctx) {
  const TensorView* training = ctx.input(2);
  if (training && training->numel() > 0 && load_int(*training, 0) != 0)
    return ctx.unsupported_error("training mode is not supported");
  KILN_RETURN_IF_ERROR(ref_copy(ctx));
  if (TensorView* mask = ctx.output(1))
    for (int64_t i = 0; i < mask->numel(); ++i) store_int(*mask, i, 1);
  return ok_status();
}

}  // namespace kiln
