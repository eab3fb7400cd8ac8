// CPU kernels for the elementwise ops (see kernels/kernel.h).
//
// Every op is a loop over rows of its output. RowLayout folds broadcasting
// into a few outer dims plus one innermost row in which each operand either
// walks (step 1) or repeats one element (step 0): same-shape operands become
// one long row, a scalar operand a repeated element, a bias over the last axis
// a walked row that restarts every row. f32 rows run the Highway loops of
// elementwise_simd.h; 16-bit float rows are widened to f32 on the stack and run
// the same loops; other dtypes use plain loops the compiler vectorizes.
// Only large outputs are split over OpenMP threads, so the int64 shape
// arithmetic of exported models (a few elements) never wakes a thread.
//
// Integer semantics (shared with the reference kernels): +,-,*,Neg,Abs wrap in
// two's complement; Div truncates toward zero, x/0 is 0 and MIN/-1 wraps;
// float to integer casts truncate toward zero and saturate, NaN giving 0.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "kernels/cpu/elementwise_simd.h"
#include "kernels/kernel.h"

namespace kiln {

namespace {

// ---- row layout and the threaded row loop ----

constexpr int kMaxOperands = 3;
constexpr int kMaxDims = 16;  // after merging; more is Unsupported

struct RowLayout {
  int operands = 0;
  int outer_rank = 0;
  int64_t outer_dims[kMaxDims] = {};
  int64_t outer_strides[kMaxOperands][kMaxDims] = {};  // elements, per operand
  int64_t rows = 0;
  int64_t row_len = 0;
  int64_t step[kMaxOperands] = {};  // 1 walks the row, 0 repeats one element
};

// The layout of `out` with each operand (no larger rank) broadcast to it.
Status make_row_layout(const KernelContext& ctx, const Shape& out,
                       std::initializer_list<const Shape*> operands, RowLayout& layout) {
  layout.operands = int(operands.size());
  const int rank = int(out.size());
  for (const Shape* in : operands)
    if (in->size() > out.size())
      return internal_error("{}: operand rank {} exceeds output rank {}", node_label(*ctx.node),
                            in->size(), out.size());
  if (shape_numel(out) == 0) return ok_status();  // rows = 0: nothing to do

  // Dims innermost first, size-1 dims dropped; a dim joins the one inside it
  // when, for every operand, the two make one run of memory.
  int64_t sizes[kMaxDims];
  int64_t strides[kMaxDims][kMaxOperands];
  int64_t running[kMaxOperands] = {1, 1, 1};
  int count = 0;
  for (int i = rank - 1; i >= 0; --i) {
    int64_t s[kMaxOperands] = {};
    int k = 0;
    for (const Shape* in : operands) {
      int j = i - (rank - int(in->size()));
      int64_t dim = j >= 0 ? (*in)[size_t(j)] : 1;
      if (dim != out[size_t(i)] && dim != 1)
        return internal_error("{}: operand shape {} does not broadcast to {}",
                              node_label(*ctx.node), shape_to_string(*in), shape_to_string(out));
      s[k] = dim == 1 ? 0 : running[k];
      running[k] *= dim;
      ++k;
    }
    if (out[size_t(i)] == 1) continue;
    bool merge = count > 0;
    for (int o = 0; merge && o < layout.operands; ++o)
      merge = s[o] == strides[count - 1][o] * sizes[count - 1];
    if (merge) {
      sizes[count - 1] *= out[size_t(i)];
      continue;
    }
    if (count == kMaxDims)
      return ctx.unsupported_error("broadcast over more than {} distinct dims", kMaxDims);
    sizes[count] = out[size_t(i)];
    std::copy(s, s + kMaxOperands, strides[count]);
    ++count;
  }
  layout.rows = 1;
  layout.row_len = count ? sizes[0] : 1;
  for (int o = 0; o < layout.operands; ++o) layout.step[o] = count ? strides[0][o] : 0;
  layout.outer_rank = std::max(count - 1, 0);
  for (int r = 0; r < layout.outer_rank; ++r) {
    int src = count - 1 - r;  // outer dims stored outermost first
    layout.outer_dims[r] = sizes[src];
    layout.rows *= sizes[src];
    for (int o = 0; o < layout.operands; ++o) layout.outer_strides[o][r] = strides[src][o];
  }
  return ok_status();
}

// Each operand's element offset at the start of a row, advanced row by row.
struct RowCursor {
  int64_t index[kMaxDims] = {};
  int64_t offset[kMaxOperands] = {};

  RowCursor(const RowLayout& l, int64_t row) {
    for (int r = l.outer_rank - 1; r >= 0; --r) {
      index[r] = row % l.outer_dims[r];
      row /= l.outer_dims[r];
      for (int o = 0; o < l.operands; ++o) offset[o] += index[r] * l.outer_strides[o][r];
    }
  }
  void next(const RowLayout& l) {
    for (int r = l.outer_rank - 1; r >= 0; --r) {
      for (int o = 0; o < l.operands; ++o) offset[o] += l.outer_strides[o][r];
      if (++index[r] < l.outer_dims[r]) return;
      for (int o = 0; o < l.operands; ++o) offset[o] -= l.outer_strides[o][r] * l.outer_dims[r];
      index[r] = 0;
    }
  }
};

// Work (elements x cost) below which a loop stays on the calling thread, and
// the work each parallel task gets.
constexpr int64_t kParallelWork = int64_t(1) << 16;
constexpr int64_t kTaskWork = int64_t(1) << 14;

// Calls row(context, operand_offsets, out_offset, n) for every row, or piece
// of a row, of the output. `cost` is an op's rough price per element (1: an
// add). Type-erased so that the OpenMP regions are compiled once.
using RowFn = void (*)(const void* context, const int64_t* offsets, int64_t out_offset,
                       int64_t n);

void for_each_row_erased(const RowLayout& l, int64_t cost, RowFn row, const void* context) {
  auto run_rows = [&](int64_t begin, int64_t end) {
    RowCursor c(l, begin);
    for (int64_t r = begin; r < end; ++r, c.next(l))
      row(context, c.offset, r * l.row_len, l.row_len);
  };
  const int64_t total = l.rows * l.row_len;
  if (total == 0) return;
  if (total * cost < kParallelWork || omp_get_max_threads() == 1) return run_rows(0, l.rows);
  const int64_t piece = std::max<int64_t>(kTaskWork / cost, 1);
  if (l.row_len >= piece) {
    const int64_t per_row = (l.row_len + piece - 1) / piece;
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < l.rows * per_row; ++t) {
      const int64_t r = t / per_row, begin = t % per_row * piece;
      RowCursor c(l, r);
      int64_t offset[kMaxOperands];
      for (int o = 0; o < l.operands; ++o) offset[o] = c.offset[o] + begin * l.step[o];
      row(context, offset, r * l.row_len + begin, std::min(piece, l.row_len - begin));
    }
  } else {
    const int64_t rows_per_task = piece / l.row_len;
    const int64_t tasks = (l.rows + rows_per_task - 1) / rows_per_task;
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < tasks; ++t)
      run_rows(t * rows_per_task, std::min(l.rows, (t + 1) * rows_per_task));
  }
}

// fn(operand_offsets, out_offset, n) for every row; see for_each_row_erased.
template <typename Fn>
void for_each_row(const RowLayout& l, int64_t cost, const Fn& fn) {
  RowFn row = [](const void* context, const int64_t* offsets, int64_t out_offset, int64_t n) {
    (*static_cast<const Fn*>(context))(offsets, out_offset, n);
  };
  for_each_row_erased(l, cost, row, &fn);
}

// ---- scalar semantics ----

template <typename T>
constexpr bool kIsHalf = std::is_same_v<T, f16> || std::is_same_v<T, bf16>;
template <typename T>
constexpr bool kIsInt = std::is_integral_v<T> && !std::is_same_v<T, bool>;

template <typename H>
float half_to_f32(H h) {
  if constexpr (std::is_same_v<H, f16>) return f16_to_f32(h);
  else return bf16_to_f32(h);
}
template <typename H>
H f32_to_half(float f) {
  if constexpr (std::is_same_v<H, f16>) return f32_to_f16(f);
  else return f32_to_bf16(f);
}
// A 16-bit float as f32; other types as they are.
template <typename T>
auto value_of(T v) {
  if constexpr (kIsHalf<T>) return half_to_f32(v);
  else return v;
}

template <typename T>
T wrap_add(T a, T b) {
  if constexpr (kIsInt<T>) return T(std::make_unsigned_t<T>(a) + std::make_unsigned_t<T>(b));
  else return a + b;
}
template <typename T>
T wrap_sub(T a, T b) {
  if constexpr (kIsInt<T>) return T(std::make_unsigned_t<T>(a) - std::make_unsigned_t<T>(b));
  else return a - b;
}
template <typename T>
T wrap_mul(T a, T b) {
  if constexpr (kIsInt<T>) return T(std::make_unsigned_t<T>(a) * std::make_unsigned_t<T>(b));
  else return a * b;
}
template <typename T>
T wrap_neg(T a) {
  if constexpr (kIsInt<T>) return wrap_sub(T(0), a);
  else return -a;
}

// Truncates toward zero, saturating; NaN gives 0.
template <typename I, typename F>
I float_to_int(F v) {
  if (std::isnan(v)) return 0;
  // min() is 0 or a power of two, exact in F; max() rounds up to one.
  if (v <= F(std::numeric_limits<I>::min())) return std::numeric_limits<I>::min();
  if (v >= F(std::numeric_limits<I>::max())) return std::numeric_limits<I>::max();
  return I(v);
}

template <typename To, typename From>
To cast_value(From v) {
  if constexpr (kIsHalf<From>) {
    return cast_value<To>(half_to_f32(v));
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (std::is_same_v<To, f16> && std::is_same_v<From, double>) {
    // Straight from f64: rounding through f32 first could round twice.
    return f64_to_f16(v);
  } else if constexpr (kIsHalf<To>) {
    return f32_to_half<To>(float(v));
  } else if constexpr (kIsInt<To> && std::is_floating_point_v<From>) {
    return float_to_int<To>(v);
  } else {
    return static_cast<To>(v);  // integer narrowing wraps (C++20)
  }
}

struct AddFn {
  static constexpr simd::BinaryF32 kF32 = simd::BinaryF32::kAdd;
  template <typename T> T operator()(T a, T b) const { return wrap_add(a, b); }
};
struct SubFn {
  static constexpr simd::BinaryF32 kF32 = simd::BinaryF32::kSub;
  template <typename T> T operator()(T a, T b) const { return wrap_sub(a, b); }
};
struct MulFn {
  static constexpr simd::BinaryF32 kF32 = simd::BinaryF32::kMul;
  template <typename T> T operator()(T a, T b) const { return wrap_mul(a, b); }
};
struct DivFn {
  static constexpr simd::BinaryF32 kF32 = simd::BinaryF32::kDiv;
  template <typename T>
  T operator()(T a, T b) const {
    if constexpr (kIsInt<T>) {
      if (b == 0) return 0;
      if constexpr (std::is_signed_v<T>)
        if (b == -1) return wrap_neg(a);
    }
    return a / b;
  }
};
template <typename T>
bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) return std::isnan(v);
  else return false;
}
struct MinFn {
  static constexpr simd::BinaryF32 kF32 = simd::BinaryF32::kMin;
  template <typename T> T operator()(T a, T b) const { return a < b || is_nan(a) ? a : b; }
};
struct MaxFn {
  static constexpr simd::BinaryF32 kF32 = simd::BinaryF32::kMax;
  template <typename T> T operator()(T a, T b) const { return a > b || is_nan(a) ? a : b; }
};

// ---- row loops ----

template <typename A, typename B, typename R, typename F>
void binary_row(const A* a, int64_t a_step, const B* b, int64_t b_step, R* y, int64_t n, F f) {
  if (a_step && b_step) {
    for (int64_t i = 0; i < n; ++i) y[i] = f(a[i], b[i]);
  } else if (a_step) {
    const B bv = b[0];
    for (int64_t i = 0; i < n; ++i) y[i] = f(a[i], bv);
  } else if (b_step) {
    const A av = a[0];
    for (int64_t i = 0; i < n; ++i) y[i] = f(av, b[i]);
  } else {
    std::fill_n(y, n, f(a[0], b[0]));
  }
}

// Stack buffers that carry 16-bit float rows through the f32 loops.
constexpr int64_t kHalfChunk = 256;

template <typename H>
void widen(const H* x, int64_t step, float* out, int64_t n) {
  for (int64_t i = 0; i < (step ? n : 1); ++i) out[i] = half_to_f32(x[i]);
}
template <typename H>
void narrow(const float* x, H* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = f32_to_half<H>(x[i]);
}

template <typename H, typename F32Row>
void half_binary_row(const H* a, int64_t a_step, const H* b, int64_t b_step, H* y, int64_t n,
                     const F32Row& row) {
  float fa[kHalfChunk], fb[kHalfChunk], fy[kHalfChunk];
  for (int64_t i = 0; i < n; i += kHalfChunk) {
    const int64_t m = std::min(kHalfChunk, n - i);
    widen(a + i * a_step, a_step, fa, m);
    widen(b + i * b_step, b_step, fb, m);
    row(fa, a_step, fb, b_step, fy, m);
    narrow(fy, y + i, m);
  }
}

template <typename H, typename F32Row>
void half_unary_row(const H* x, H* y, int64_t n, const F32Row& row) {
  float fx[kHalfChunk];
  for (int64_t i = 0; i < n; i += kHalfChunk) {
    const int64_t m = std::min(kHalfChunk, n - i);
    widen(x + i, 1, fx, m);
    row(fx, fx, m);
    narrow(fx, y + i, m);
  }
}

// Runs row(a, a_step, b, b_step, y, n) over the broadcast rows of y = a (op) b.
template <typename A, typename B, typename R, typename Row>
Status binary_rows(const KernelContext& ctx, const TensorView& a, const TensorView& b,
                   TensorView& y, int64_t cost, const Row& row) {
  RowLayout l;
  KILN_RETURN_IF_ERROR(make_row_layout(ctx, y.shape, {&a.shape, &b.shape}, l));
  const A* pa = a.as<const A>();
  const B* pb = b.as<const B>();
  R* py = y.as<R>();
  for_each_row(l, cost, [&](const int64_t* off, int64_t out_off, int64_t n) {
    row(pa + off[0], l.step[0], pb + off[1], l.step[1], py + out_off, n);
  });
  return ok_status();
}

// Runs row(x, y, n) over contiguous pieces of y = f(x).
template <typename T, typename U, typename Row>
Status unary_rows(const KernelContext& ctx, const TensorView& x, TensorView& y, int64_t cost,
                  const Row& row) {
  RowLayout l;
  KILN_RETURN_IF_ERROR(make_row_layout(ctx, y.shape, {&x.shape}, l));
  const T* px = x.as<const T>();
  U* py = y.as<U>();
  for_each_row(l, cost, [&](const int64_t* off, int64_t out_off, int64_t n) {
    row(px + off[0], py + out_off, n);
  });
  return ok_status();
}

Status unsupported_dtype(const KernelContext& ctx, DType dtype) {
  return ctx.unsupported_error("dtype {} is not supported", dtype_name(dtype));
}

void copy_bytes(void* dst, const void* src, size_t bytes) {
  if (bytes > 0 && dst != src) std::memcpy(dst, src, bytes);
}

// ---- op families ----

// Rows this short are cheaper in plain code than through SIMD dispatch; the
// results are the same bits.
constexpr int64_t kSimdMinRow = 16;

template <typename Op>
Status arithmetic(const KernelContext& ctx, const TensorView& a, const TensorView& b,
                  TensorView& y) {
  return dtype_visit(a.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float>) {
      return binary_rows<T, T, T>(ctx, a, b, y, 1,
          [](const float* pa, int64_t as, const float* pb, int64_t bs, float* py, int64_t n) {
            if (n < kSimdMinRow) return binary_row(pa, as, pb, bs, py, n, Op());
            simd::binary_f32(Op::kF32, pa, size_t(as), pb, size_t(bs), py, size_t(n));
          });
    } else if constexpr (kIsHalf<T>) {
      return binary_rows<T, T, T>(ctx, a, b, y, 4,
          [](const T* pa, int64_t as, const T* pb, int64_t bs, T* py, int64_t n) {
            half_binary_row(pa, as, pb, bs, py, n,
                [](const float* fa, int64_t fas, const float* fb, int64_t fbs, float* fy,
                   int64_t m) {
                  simd::binary_f32(Op::kF32, fa, size_t(fas), fb, size_t(fbs), fy, size_t(m));
                });
          });
    } else if constexpr (std::is_same_v<T, bool>) {
      return unsupported_dtype(ctx, a.dtype);
    } else {
      const int64_t cost = std::is_same_v<Op, DivFn> && kIsInt<T> ? 4 : 1;
      return binary_rows<T, T, T>(ctx, a, b, y, cost,
          [](const T* pa, int64_t as, const T* pb, int64_t bs, T* py, int64_t n) {
            binary_row(pa, as, pb, bs, py, n, Op());
          });
    }
  });
}

template <typename Op>
Status binary_kernel(KernelContext& ctx) {
  return arithmetic<Op>(ctx, *ctx.input(0), *ctx.input(1), *ctx.output(0));
}

// Min/Max over any number of inputs: the output accumulates one input at a time.
template <typename Op>
Status variadic_kernel(KernelContext& ctx) {
  TensorView& y = *ctx.output(0);
  if (ctx.inputs.size() == 1) {
    copy_bytes(y.data, ctx.input(0)->data, y.nbytes());
    return ok_status();
  }
  KILN_RETURN_IF_ERROR(arithmetic<Op>(ctx, *ctx.input(0), *ctx.input(1), y));
  for (size_t i = 2; i < ctx.inputs.size(); ++i)
    KILN_RETURN_IF_ERROR(arithmetic<Op>(ctx, y, *ctx.input(i), y));
  return ok_status();
}

template <typename Cmp>
Status compare_kernel(KernelContext& ctx) {
  const TensorView& a = *ctx.input(0);
  return dtype_visit(a.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    return binary_rows<T, T, bool>(ctx, a, *ctx.input(1), *ctx.output(0), 1,
        [](const T* pa, int64_t as, const T* pb, int64_t bs, bool* py, int64_t n) {
          binary_row(pa, as, pb, bs, py, n,
                     [](T u, T v) { return Cmp()(value_of(u), value_of(v)); });
        });
  });
}

// A unary op: f32 and 16-bit floats through the SIMD loop `op`, f64 (and
// integers when kIntegers) through scalar(v).
template <bool kIntegers, typename Scalar>
Status unary_kernel(KernelContext& ctx, simd::UnaryF32 op, int64_t cost, const Scalar& scalar,
                    simd::UnaryF32Params params = {}) {
  const TensorView& x = *ctx.input(0);
  TensorView& y = *ctx.output(0);
  return dtype_visit(x.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float>) {
      return unary_rows<T, T>(ctx, x, y, cost, [&](const float* px, float* py, int64_t n) {
        simd::unary_f32(op, px, py, size_t(n), params);
      });
    } else if constexpr (kIsHalf<T>) {
      return unary_rows<T, T>(ctx, x, y, cost + 4, [&](const T* px, T* py, int64_t n) {
        half_unary_row(px, py, n, [&](const float* fx, float* fy, int64_t m) {
          simd::unary_f32(op, fx, fy, size_t(m), params);
        });
      });
    } else if constexpr (std::is_same_v<T, double> || (kIntegers && kIsInt<T>)) {
      return unary_rows<T, T>(ctx, x, y, cost, [&](const T* px, T* py, int64_t n) {
        for (int64_t i = 0; i < n; ++i) py[i] = scalar(px[i]);
      });
    } else {
      return unsupported_dtype(ctx, x.dtype);
    }
  });
}

constexpr int64_t kCheap = 1, kTranscendental = 8;

template <typename T>
T scalar_abs(T v) {
  if constexpr (std::is_floating_point_v<T>) return std::abs(v);
  else if constexpr (std::is_signed_v<T>) return v < 0 ? wrap_neg(v) : v;
  else return v;
}

// Element 0 of an optional scalar input (Clip's bounds, Pow's exponent).
double scalar_as_double(const TensorView& t) {
  return dtype_visit(t.dtype, [&](auto tag) -> double {
    return double(value_of(t.as<decltype(tag)>()[0]));
  });
}
int64_t scalar_as_int(const TensorView& t) {
  return dtype_visit(t.dtype, [&](auto tag) -> int64_t {
    using T = decltype(tag);
    if constexpr (kIsInt<T> || std::is_same_v<T, bool>) return int64_t(t.as<T>()[0]);
    else return 0;
  });
}

template <typename T>
T int_pow(T base, int64_t exponent) {
  if (exponent < 0) {  // 1 / base^-e truncated toward zero
    if (base == 1) return 1;
    if constexpr (std::is_signed_v<T>)
      if (base == -1) return exponent % 2 ? T(-1) : T(1);
    return 0;
  }
  std::make_unsigned_t<T> result = 1, b = std::make_unsigned_t<T>(base);
  for (uint64_t e = uint64_t(exponent); e; e >>= 1, b = decltype(b)(b * b))
    if (e & 1) result = decltype(result)(result * b);
  return T(result);
}

template <typename A, typename B>
A pow_value(A a, B b) {
  if constexpr (std::is_same_v<A, float>) {
    return std::pow(a, float(value_of(b)));
  } else if constexpr (kIsHalf<A>) {
    return f32_to_half<A>(std::pow(half_to_f32(a), float(value_of(b))));
  } else if constexpr (std::is_same_v<A, double>) {
    return std::pow(a, double(value_of(b)));
  } else if constexpr (kIsInt<B>) {
    return int_pow(a, int64_t(b));  // u64 exponents are not kiln dtypes
  } else {
    return float_to_int<A>(std::pow(double(a), double(value_of(b))));
  }
}

}  // namespace

Status cpu_Add(KernelContext& ctx) { return binary_kernel<AddFn>(ctx); }
Status cpu_Sub(KernelContext& ctx) { return binary_kernel<SubFn>(ctx); }
Status cpu_Mul(KernelContext& ctx) { return binary_kernel<MulFn>(ctx); }
Status cpu_Div(KernelContext& ctx) { return binary_kernel<DivFn>(ctx); }
Status cpu_Min(KernelContext& ctx) { return variadic_kernel<MinFn>(ctx); }
Status cpu_Max(KernelContext& ctx) { return variadic_kernel<MaxFn>(ctx); }

Status cpu_Pow(KernelContext& ctx) {
  const TensorView& a = *ctx.input(0);
  const TensorView& b = *ctx.input(1);
  TensorView& y = *ctx.output(0);
  // A single f32 exponent that a cheaper op computes exactly as well.
  if (a.dtype == DType::kF32 && b.dtype != DType::kBool && b.numel() == 1 &&
      y.numel() == a.numel()) {
    const double e = scalar_as_double(b);
    const float* x = a.as<const float>();
    float* out = y.as<float>();
    if (e == 1) {
      copy_bytes(out, x, y.nbytes());
      return ok_status();
    }
    if (e == 2 || e == 0.5) {
      return unary_rows<float, float>(ctx, a, y, kCheap,
                                      [e](const float* px, float* py, int64_t n) {
        if (e == 2) simd::binary_f32(simd::BinaryF32::kMul, px, 1, px, 1, py, size_t(n));
        else simd::unary_f32(simd::UnaryF32::kSqrt, px, py, size_t(n));
      });
    }
  }
  return dtype_visit(a.dtype, [&](auto a_tag) -> Status {
    using A = decltype(a_tag);
    return dtype_visit(b.dtype, [&](auto b_tag) -> Status {
      using B = decltype(b_tag);
      if constexpr (std::is_same_v<A, bool> || std::is_same_v<B, bool>) {
        return unsupported_dtype(ctx, std::is_same_v<A, bool> ? a.dtype : b.dtype);
      } else {
        return binary_rows<A, B, A>(ctx, a, b, y, kTranscendental,
            [](const A* pa, int64_t as, const B* pb, int64_t bs, A* py, int64_t n) {
              binary_row(pa, as, pb, bs, py, n, [](A u, B v) { return pow_value(u, v); });
            });
      }
    });
  });
}

Status cpu_Equal(KernelContext& ctx) { return compare_kernel<std::equal_to<>>(ctx); }
Status cpu_Less(KernelContext& ctx) { return compare_kernel<std::less<>>(ctx); }
Status cpu_Greater(KernelContext& ctx) { return compare_kernel<std::greater<>>(ctx); }

Status cpu_Sqrt(KernelContext& ctx) {
  return unary_kernel<false>(ctx, simd::UnaryF32::kSqrt, kCheap,
                             [](double v) { return std::sqrt(v); });
}
Status cpu_Reciprocal(KernelContext& ctx) {
  return unary_kernel<false>(ctx, simd::UnaryF32::kReciprocal, kCheap,
                             [](double v) { return 1 / v; });
}
Status cpu_Neg(KernelContext& ctx) {
  return unary_kernel<true>(ctx, simd::UnaryF32::kNeg, kCheap, [](auto v) { return wrap_neg(v); });
}
Status cpu_Abs(KernelContext& ctx) {
  return unary_kernel<true>(ctx, simd::UnaryF32::kAbs, kCheap,
                            [](auto v) { return scalar_abs(v); });
}
Status cpu_Exp(KernelContext& ctx) {
  return unary_kernel<false>(ctx, simd::UnaryF32::kExp, kTranscendental,
                             [](double v) { return std::exp(v); });
}
Status cpu_Log(KernelContext& ctx) {
  return unary_kernel<false>(ctx, simd::UnaryF32::kLog, kTranscendental,
                             [](double v) { return std::log(v); });
}
Status cpu_Erf(KernelContext& ctx) {
  return unary_kernel<false>(ctx, simd::UnaryF32::kErf, kTranscendental,
                             [](double v) { return std::erf(v); });
}
Status cpu_Tanh(KernelContext& ctx) {
  return unary_kernel<false>(ctx, simd::UnaryF32::kTanh, kTranscendental,
                             [](double v) { return std::tanh(v); });
}
Status cpu_Sigmoid(KernelContext& ctx) {
  return unary_kernel<false>(ctx, simd::UnaryF32::kSigmoid, kTranscendental, [](double v) {
    const double e = std::exp(-std::abs(v));
    return v < 0 ? e / (1 + e) : 1 / (1 + e);
  });
}
Status cpu_Relu(KernelContext& ctx) {
  return unary_kernel<true>(ctx, simd::UnaryF32::kRelu, kCheap,
                            [](auto v) { return v < 0 ? decltype(v)(0) : v; });
}
Status cpu_LeakyRelu(KernelContext& ctx) {
  const float alpha = ctx.attrs().get_float("alpha", 0.01f);
  return unary_kernel<false>(ctx, simd::UnaryF32::kLeakyRelu, kCheap,
                             [alpha](double v) { return v < 0 ? v * alpha : v; }, {.alpha = alpha});
}
Status cpu_Cos(KernelContext& ctx) {
  return unary_kernel<false>(ctx, simd::UnaryF32::kCos, kTranscendental,
                             [](double v) { return std::cos(v); });
}
Status cpu_Sin(KernelContext& ctx) {
  return unary_kernel<false>(ctx, simd::UnaryF32::kSin, kTranscendental,
                             [](double v) { return std::sin(v); });
}

Status cpu_Clip(KernelContext& ctx) {
  const TensorView* lo = ctx.input(1);
  const TensorView* hi = ctx.input(2);
  if (dtype_is_float(ctx.input(0)->dtype)) {
    const double flo = lo ? scalar_as_double(*lo) : -INFINITY;
    const double fhi = hi ? scalar_as_double(*hi) : INFINITY;
    return unary_kernel<false>(ctx, simd::UnaryF32::kClip, kCheap,
        [flo, fhi](double v) {
          v = v < flo ? flo : v;
          return v > fhi ? fhi : v;
        },
        {.lo = float(flo), .hi = float(fhi)});
  }
  const int64_t ilo = lo ? scalar_as_int(*lo) : std::numeric_limits<int64_t>::min();
  const int64_t ihi = hi ? scalar_as_int(*hi) : std::numeric_limits<int64_t>::max();
  return unary_kernel<true>(ctx, simd::UnaryF32::kClip, kCheap, [ilo, ihi](auto v) {
    // The bounds are values of v's type, so the result fits it.
    int64_t w = int64_t(v);
    w = w < ilo ? ilo : w;
    return decltype(v)(w > ihi ? ihi : w);
  });
}

Status cpu_Where(KernelContext& ctx) {
  const TensorView& c = *ctx.input(0);
  const TensorView& a = *ctx.input(1);
  const TensorView& b = *ctx.input(2);
  TensorView& y = *ctx.output(0);
  RowLayout l;
  KILN_RETURN_IF_ERROR(make_row_layout(ctx, y.shape, {&c.shape, &a.shape, &b.shape}, l));
  // Selection moves bits, so only the element size matters.
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const uint8_t* pc = c.as<const uint8_t>();
    const T* pa = a.as<const T>();
    const T* pb = b.as<const T>();
    T* py = y.as<T>();
    for_each_row(l, 1, [&](const int64_t* off, int64_t out_off, int64_t n) {
      const uint8_t* rc = pc + off[0];
      const T* ra = pa + off[1];
      const T* rb = pb + off[2];
      T* ry = py + out_off;
      const int64_t cs = l.step[0], as = l.step[1], bs = l.step[2];
      if (cs && as && bs) {
        for (int64_t i = 0; i < n; ++i) ry[i] = rc[i] ? ra[i] : rb[i];
      } else {
        for (int64_t i = 0; i < n; ++i) ry[i] = rc[i * cs] ? ra[i * as] : rb[i * bs];
      }
    });
    return ok_status();
  };
  switch (dtype_size(y.dtype)) {
    case 1: return run(uint8_t{});
    case 2: return run(uint16_t{});
    case 4: return run(uint32_t{});
    case 8: return run(uint64_t{});
    default: return unsupported_dtype(ctx, y.dtype);
  }
}

Status cpu_Not(KernelContext& ctx) {
  return unary_rows<uint8_t, bool>(ctx, *ctx.input(0), *ctx.output(0), kCheap,
                                   [](const uint8_t* px, bool* py, int64_t n) {
                                     for (int64_t i = 0; i < n; ++i) py[i] = px[i] == 0;
                                   });
}

Status cpu_Cast(KernelContext& ctx) {
  const TensorView& x = *ctx.input(0);
  TensorView& y = *ctx.output(0);
  if (x.dtype == y.dtype) {
    copy_bytes(y.data, x.data, y.nbytes());
    return ok_status();
  }
  return dtype_visit(x.dtype, [&](auto from_tag) -> Status {
    using From = decltype(from_tag);
    return dtype_visit(y.dtype, [&](auto to_tag) -> Status {
      using To = decltype(to_tag);
      const int64_t cost = kIsHalf<From> || kIsHalf<To> ? 4 : 1;
      return unary_rows<From, To>(ctx, x, y, cost, [](const From* px, To* py, int64_t n) {
        for (int64_t i = 0; i < n; ++i) py[i] = cast_value<To>(px[i]);
      });
    });
  });
}

Status cpu_Identity(KernelContext& ctx) {
  copy_bytes(ctx.output(0)->data, ctx.input(0)->data, ctx.output(0)->nbytes());
  return ok_status();
}

Status cpu_Dropout(KernelContext& ctx) {
  const TensorView* training = ctx.input(2);
  if (training && training->numel() > 0 && scalar_as_int(*training) != 0)
    return ctx.unsupported_error("training mode is not supported");
  copy_bytes(ctx.output(0)->data, ctx.input(0)->data, ctx.output(0)->nbytes());
  if (TensorView* mask = ctx.output(1); mask && mask->numel() > 0)
    std::memset(mask->data, 1, mask->nbytes());
  return ok_status();
}

}  // namespace kiln
