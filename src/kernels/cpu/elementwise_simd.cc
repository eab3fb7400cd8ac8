// Highway per-target loops behind kernels/cpu/elementwise_simd.h. This file is
// compiled once per SIMD target (foreach_target.h re-includes it).
#include "kernels/cpu/elementwise_simd.h"

#include <math.h>

#include <algorithm>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/elementwise_simd.cc"
#include <hwy/foreach_target.h>  // must precede highway.h

#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace kiln::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;
constexpr size_t kMaxLanes = HWY_MAX_BYTES / sizeof(float);

// libm on every lane, for the rare vectors outside a fast formula's range.
HWY_INLINE V per_lane(D d, V x, float (*fn)(float)) {
  float buf[kMaxLanes];
  hn::StoreU(x, d, buf);
  for (size_t i = 0; i < hn::Lanes(d); ++i) buf[i] = fn(buf[i]);
  return hn::LoadU(d, buf);
}

struct SqrtOp {
  HWY_INLINE V operator()(D, V x) const { return hn::Sqrt(x); }
};
struct ReciprocalOp {
  HWY_INLINE V operator()(D d, V x) const { return hn::Div(hn::Set(d, 1.0f), x); }
};
struct NegOp {
  HWY_INLINE V operator()(D, V x) const { return hn::Neg(x); }
};
struct AbsOp {
  HWY_INLINE V operator()(D, V x) const { return hn::Abs(x); }
};
struct ExpOp {
  HWY_INLINE V operator()(D d, V x) const {
    // Highway's Exp is wrong past 104 and maps NaN to 0.
    if (HWY_LIKELY(hn::AllTrue(d, hn::Le(x, hn::Set(d, 88.0f))))) return hn::Exp(d, x);
    return per_lane(d, x, ::expf);
  }
};
struct LogOp {
  HWY_INLINE V operator()(D d, V x) const {
    // Highway's Log is defined on (0, inf) only.
    if (HWY_LIKELY(hn::AllTrue(d, hn::And(hn::Gt(x, hn::Zero(d)), hn::IsFinite(x)))))
      return hn::Log(d, x);
    return per_lane(d, x, ::logf);
  }
};
struct SinOp {
  HWY_INLINE V operator()(D d, V x) const {
    // Highway's Sin/Cos reduce the argument accurately only up to 39000.
    if (HWY_LIKELY(hn::AllTrue(d, hn::Le(hn::Abs(x), hn::Set(d, 39000.0f)))))
      return hn::Sin(d, x);
    return per_lane(d, x, ::sinf);
  }
};
struct CosOp {
  HWY_INLINE V operator()(D d, V x) const {
    if (HWY_LIKELY(hn::AllTrue(d, hn::Le(hn::Abs(x), hn::Set(d, 39000.0f)))))
      return hn::Cos(d, x);
    return per_lane(d, x, ::cosf);
  }
};
struct TanhOp {
  HWY_INLINE V operator()(D d, V x) const {
    return hn::IfThenElse(hn::IsNaN(x), x, hn::Tanh(d, x));
  }
};
struct SigmoidOp {
  HWY_INLINE V operator()(D d, V x) const {
    // e = exp(-|x|) never overflows; sigmoid(x) = 1/(1+e) for x >= 0 and
    // e/(1+e) below, which keeps full relative precision for negative x.
    const V one = hn::Set(d, 1.0f);
    const V e = hn::Exp(d, hn::Neg(hn::Abs(x)));
    const V r = hn::Div(one, hn::Add(one, e));
    const V y = hn::IfThenElse(hn::Lt(x, hn::Zero(d)), hn::Mul(e, r), r);
    return hn::IfThenElse(hn::IsNaN(x), x, y);
  }
};
// erf(x) = x P(x^2) for |x| <= 1, else 1 - exp(-x^2) Q(1 / (1 + |x|/2)); P and
// Q are least-squares fits (relative error 1.8e-7 in f32, 1.5 ulp).
struct ErfOp {
  HWY_INLINE V operator()(D d, V x) const {
    const V one = hn::Set(d, 1.0f);
    const V ax = hn::Abs(x);
    const V x2 = hn::Mul(x, x);
    V p = hn::Set(d, -0.000564589631f);
    p = hn::MulAdd(p, x2, hn::Set(d, 0.00492130406f));
    p = hn::MulAdd(p, x2, hn::Set(d, -0.0267147645f));
    p = hn::MulAdd(p, x2, hn::Set(d, 0.112803131f));
    p = hn::MulAdd(p, x2, hn::Set(d, -0.376123458f));
    p = hn::MulAdd(p, x2, hn::Set(d, 1.12837911f));
    const V small = hn::Mul(ax, p);
    const V t = hn::Div(one, hn::MulAdd(ax, hn::Set(d, 0.5f), one));
    V q = hn::Set(d, -0.216092438f);
    q = hn::MulAdd(q, t, hn::Set(d, 0.597820342f));
    q = hn::MulAdd(q, t, hn::Set(d, -0.0237317402f));
    q = hn::MulAdd(q, t, hn::Set(d, 0.375636131f));
    q = hn::MulAdd(q, t, hn::Set(d, 0.265153855f));
    q = hn::MulAdd(q, t, hn::Set(d, 0.00126527355f));
    const V large = hn::NegMulAdd(hn::Exp(d, hn::Neg(x2)), q, one);
    const V y = hn::CopySign(hn::IfThenElse(hn::Le(ax, one), small, large), x);
    return hn::IfThenElse(hn::IsNaN(x), x, y);
  }
};
// GELU, exact: x/2 (1 + erf(x/sqrt2)).
struct GeluOp {
  HWY_INLINE V operator()(D d, V x) const {
    const V half_x = hn::Mul(x, hn::Set(d, 0.5f));
    return hn::MulAdd(half_x, ErfOp()(d, hn::Mul(x, hn::Set(d, 0.70710678118654752f))), half_x);
  }
};
// GELU, tanh form: x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
struct GeluTanhOp {
  HWY_INLINE V operator()(D d, V x) const {
    const V x3 = hn::Mul(hn::Mul(x, x), x);
    const V inner = hn::Mul(hn::MulAdd(x3, hn::Set(d, 0.044715f), x), hn::Set(d, 0.79788456080286536f));
    const V half_x = hn::Mul(x, hn::Set(d, 0.5f));
    return hn::MulAdd(half_x, TanhOp()(d, inner), half_x);
  }
};
// x sigmoid(alpha x): SiLU at alpha 1, CLIP's quick GELU at 1.702.
struct SiluOp {
  float alpha;
  HWY_INLINE V operator()(D d, V x) const { return hn::Mul(x, SigmoidOp()(d, hn::Mul(x, hn::Set(d, alpha)))); }
};
struct ReluOp {
  HWY_INLINE V operator()(D d, V x) const {
    return hn::IfThenZeroElse(hn::Lt(x, hn::Zero(d)), x);
  }
};
struct LeakyReluOp {
  float alpha;
  HWY_INLINE V operator()(D d, V x) const {
    return hn::IfThenElse(hn::Lt(x, hn::Zero(d)), hn::Mul(x, hn::Set(d, alpha)), x);
  }
};
struct ClipOp {
  float lo, hi;
  HWY_INLINE V operator()(D d, V x) const {
    // Compares rather than Min/Max so that NaN passes through and lo > hi gives hi (ONNX).
    const V l = hn::Set(d, lo), h = hn::Set(d, hi);
    const V y = hn::IfThenElse(hn::Lt(x, l), l, x);
    return hn::IfThenElse(hn::Gt(y, h), h, y);
  }
};

struct AddOp {
  HWY_INLINE V operator()(D, V a, V b) const { return hn::Add(a, b); }
};
struct SubOp {
  HWY_INLINE V operator()(D, V a, V b) const { return hn::Sub(a, b); }
};
struct MulOp {
  HWY_INLINE V operator()(D, V a, V b) const { return hn::Mul(a, b); }
};
struct DivOp {
  HWY_INLINE V operator()(D, V a, V b) const { return hn::Div(a, b); }
};
struct MinOp {
  HWY_INLINE V operator()(D, V a, V b) const {
    return hn::IfThenElse(hn::Or(hn::Lt(a, b), hn::IsNaN(a)), a, b);
  }
};
struct MaxOp {
  HWY_INLINE V operator()(D, V a, V b) const {
    return hn::IfThenElse(hn::Or(hn::Gt(a, b), hn::IsNaN(a)), a, b);
  }
};

template <class Op>
HWY_INLINE void unary_loop(const float* x, float* y, size_t n, const Op& op) {
  const D d;
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(op(d, hn::LoadU(d, x + i)), d, y + i);
  if (i == n) return;
  // The tail goes through a full vector padded with a real element, so the
  // padding never sends a vector down a slow path.
  float buf[kMaxLanes];
  std::fill(buf, buf + N, x[n - 1]);
  std::copy(x + i, x + n, buf);
  hn::StoreU(op(d, hn::LoadU(d, buf)), d, buf);
  std::copy(buf, buf + (n - i), y + i);
}

template <bool kWalkA, bool kWalkB, class Op>
HWY_INLINE void binary_loop(const float* a, const float* b, float* y, size_t n, const Op& op) {
  const D d;
  const size_t N = hn::Lanes(d);
  const V a0 = hn::Set(d, a[0]), b0 = hn::Set(d, b[0]);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    V va = a0, vb = b0;
    if constexpr (kWalkA) va = hn::LoadU(d, a + i);
    if constexpr (kWalkB) vb = hn::LoadU(d, b + i);
    hn::StoreU(op(d, va, vb), d, y + i);
  }
  if (i == n) return;
  float buf_a[kMaxLanes], buf_b[kMaxLanes], buf_y[kMaxLanes];
  V va = a0, vb = b0;
  if constexpr (kWalkA) {
    std::copy(a + i, a + n, buf_a);
    std::fill(buf_a + (n - i), buf_a + N, a[n - 1]);
    va = hn::LoadU(d, buf_a);
  }
  if constexpr (kWalkB) {
    std::copy(b + i, b + n, buf_b);
    std::fill(buf_b + (n - i), buf_b + N, b[n - 1]);
    vb = hn::LoadU(d, buf_b);
  }
  hn::StoreU(op(d, va, vb), d, buf_y);
  std::copy(buf_y, buf_y + (n - i), y + i);
}

template <class Op>
HWY_INLINE void binary_steps(const float* a, size_t a_step, const float* b, size_t b_step,
                             float* y, size_t n, const Op& op) {
  if (a_step && b_step) return binary_loop<true, true>(a, b, y, n, op);
  if (a_step) return binary_loop<true, false>(a, b, y, n, op);
  if (b_step) return binary_loop<false, true>(a, b, y, n, op);
  return binary_loop<false, false>(a, b, y, n, op);
}

void UnaryF32Impl(UnaryF32 op, const float* x, float* y, size_t n, const UnaryF32Params& p) {
  if (n == 0) return;
  switch (op) {
    case UnaryF32::kSqrt: return unary_loop(x, y, n, SqrtOp());
    case UnaryF32::kReciprocal: return unary_loop(x, y, n, ReciprocalOp());
    case UnaryF32::kNeg: return unary_loop(x, y, n, NegOp());
    case UnaryF32::kAbs: return unary_loop(x, y, n, AbsOp());
    case UnaryF32::kExp: return unary_loop(x, y, n, ExpOp());
    case UnaryF32::kLog: return unary_loop(x, y, n, LogOp());
    case UnaryF32::kErf: return unary_loop(x, y, n, ErfOp());
    case UnaryF32::kTanh: return unary_loop(x, y, n, TanhOp());
    case UnaryF32::kSigmoid: return unary_loop(x, y, n, SigmoidOp());
    case UnaryF32::kRelu: return unary_loop(x, y, n, ReluOp());
    case UnaryF32::kLeakyRelu: return unary_loop(x, y, n, LeakyReluOp{p.alpha});
    case UnaryF32::kClip: return unary_loop(x, y, n, ClipOp{p.lo, p.hi});
    case UnaryF32::kCos: return unary_loop(x, y, n, CosOp());
    case UnaryF32::kSin: return unary_loop(x, y, n, SinOp());
    case UnaryF32::kGelu: return unary_loop(x, y, n, GeluOp());
    case UnaryF32::kGeluTanh: return unary_loop(x, y, n, GeluTanhOp());
    case UnaryF32::kSilu: return unary_loop(x, y, n, SiluOp{p.alpha});
  }
}

void BinaryF32Impl(BinaryF32 op, const float* a, size_t a_step, const float* b, size_t b_step,
                   float* y, size_t n) {
  if (n == 0) return;
  switch (op) {
    case BinaryF32::kAdd: return binary_steps(a, a_step, b, b_step, y, n, AddOp());
    case BinaryF32::kSub: return binary_steps(a, a_step, b, b_step, y, n, SubOp());
    case BinaryF32::kMul: return binary_steps(a, a_step, b, b_step, y, n, MulOp());
    case BinaryF32::kDiv: return binary_steps(a, a_step, b, b_step, y, n, DivOp());
    case BinaryF32::kMin: return binary_steps(a, a_step, b, b_step, y, n, MinOp());
    case BinaryF32::kMax: return binary_steps(a, a_step, b, b_step, y, n, MaxOp());
  }
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace kiln::simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kiln::simd {

HWY_EXPORT(UnaryF32Impl);
HWY_EXPORT(BinaryF32Impl);

void unary_f32(UnaryF32 op, const float* x, float* y, size_t n, const UnaryF32Params& params) {
  HWY_DYNAMIC_DISPATCH(UnaryF32Impl)(op, x, y, n, params);
}

void binary_f32(BinaryF32 op, const float* a, size_t a_step, const float* b, size_t b_step,
                float* y, size_t n) {
  HWY_DYNAMIC_DISPATCH(BinaryF32Impl)(op, a, a_step, b, b_step, y, n);
}

}  // namespace kiln::simd
#endif  // HWY_ONCE
