// The f32 unary ops of kernels/cpu/elementwise_simd.h as per-target Highway
// functors, for every loop that applies one: elementwise_simd.cc's rows and
// gemm.cc's epilogue, which activates each tile while it is in L1. Include
// it after <hwy/foreach_target.h> (it is re-included once per target).
//
//   simd::HWY_NAMESPACE::visit_unary(op, params, [&](const auto& f) {
//     simd::HWY_NAMESPACE::unary_loop(x, y, n, f);
//   });
// NOLINTBEGIN(llvm-header-guard): Highway's per-target include guard
#if defined(KILN_KERNELS_CPU_UNARY_OPS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KILN_KERNELS_CPU_UNARY_OPS_INL_H_
#undef KILN_KERNELS_CPU_UNARY_OPS_INL_H_
#else
#define KILN_KERNELS_CPU_UNARY_OPS_INL_H_
#endif
// NOLINTEND(llvm-header-guard)

#include <math.h>

#include <algorithm>

#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>

#include "kernels/cpu/elementwise_simd.h"

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

// exp(x) for x <= 0 (a softmax score less its row's max; sigmoid's, erf's
// and GELU's exp(-|y|)), within about an f32 ulp of the true value (1.0103
// ulp at worst over every float in [-87, 0], against double exp):
// e^r 2^n with n = round(x log2(e)), r = x - n ln(2) in two parts
// (0.693359375 - 2.12194440e-4), and e^r = 1 + r + r^2 p(r) with Cephes'
// expf polynomial p of degree 5. Cheaper than Highway's Exp, which also
// serves x > 0 (measurements: docs/performance.md#exp). Below -88 (-inf
// too) it gives 0: n is -127 there, whose 2^n has a zero exponent field,
// i.e. is 0. A NaN gives 0 or NaN (as the target's Max treats it); every
// caller deals with NaN inputs itself.
HWY_INLINE V ExpNonPositive(D d, V x) {
  const hn::RebindToSigned<D> di;
  x = hn::Max(x, hn::Set(d, -88.0f));
  // n = round(x log2(e)) by adding 1.5 * 2^23, whose ulp is 1: the sum's
  // low mantissa bits are then n + 2^22, which give 2^n's exponent below
  // with one integer add, where a round and a conversion (with Highway's
  // range fix-up, 4 more instructions) took 6 (docs/performance.md#exp).
  // Every x in [-inf, 0] gives the bits it gave before on SSSE3; on AVX-512
  // six differ (GCC fuses the multiply and the add, which moves a tie's
  // rounding), all within the same accuracy: 1.0103 ulp at worst against
  // double exp on [-87, 0], before and after, every float checked.
  const V shifter = hn::Set(d, 12582912.0f);
  const V shifted = hn::Add(hn::Mul(x, hn::Set(d, 1.44269504f)), shifter);
  const V n = hn::Sub(shifted, shifter);
  const V r = hn::MulAdd(n, hn::Set(d, 2.12194440e-4f), hn::MulAdd(n, hn::Set(d, -0.693359375f), x));
  V p = hn::Set(d, 1.9875691500e-4f);
  p = hn::MulAdd(p, r, hn::Set(d, 1.3981999507e-3f));
  p = hn::MulAdd(p, r, hn::Set(d, 8.3334519073e-3f));
  p = hn::MulAdd(p, r, hn::Set(d, 4.1665795894e-2f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.6666665459e-1f));
  p = hn::MulAdd(p, r, hn::Set(d, 5.0000001201e-1f));
  const V e_r = hn::Add(hn::MulAdd(p, hn::Mul(r, r), r), hn::Set(d, 1.0f));
  const auto biased = hn::Add(hn::BitCast(di, shifted), hn::Set(di, 127 - 0x4B400000));  // n + 127
  return hn::Mul(e_r, hn::BitCast(d, hn::ShiftLeft<23>(biased)));
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
    const V e = ExpNonPositive(d, hn::Neg(hn::Abs(x)));
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
    const V large = hn::NegMulAdd(ExpNonPositive(d, hn::Neg(x2)), q, one);
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
// GELU, tanh form: x/2 (1 + tanh(z)), z = sqrt(2/pi) (x + 0.044715 x^3),
// computed as x / (1 + exp(-2z)), the same function: one exp and a divide
// instead of Tanh's Expm1, divide and range selects. As in SigmoidOp, the
// exp is e = exp(-2|z|), which never overflows: x / (1 + e) for z >= 0,
// x e / (1 + e) below.
struct GeluTanhOp {
  HWY_INLINE V operator()(D d, V x) const {
    const V minus_2z = hn::Mul(x, hn::MulAdd(hn::Mul(x, x), hn::Set(d, -0.044715f * 1.5957691216057308f),
                                             hn::Set(d, -1.5957691216057308f)));
    const V e = ExpNonPositive(d, hn::Neg(hn::Abs(minus_2z)));
    const V r = hn::Div(x, hn::Add(hn::Set(d, 1.0f), e));
    return hn::IfThenElse(hn::Gt(minus_2z, hn::Zero(d)), hn::Mul(r, e), r);
  }
};
// x sigmoid(alpha x): SiLU at alpha 1, CLIP's quick GELU at 1.702. As in
// GeluTanhOp, x / (1 + e) with e = exp(-|alpha x|), times e where alpha x < 0:
// one divide with x on top rather than a sigmoid, then a product. SiLU over
// 4096 floats in L1, one thread, three alternated runs: 3.96-4.04 -> 3.51-3.53
// ns per 16 floats. A NaN stays NaN: the divide or the product carries it.
struct SiluOp {
  float alpha;
  HWY_INLINE V operator()(D d, V x) const {
    const V ax = hn::Mul(x, hn::Set(d, alpha));
    const V e = ExpNonPositive(d, hn::Neg(hn::Abs(ax)));
    const V r = hn::Div(x, hn::Add(hn::Set(d, 1.0f), e));
    return hn::IfThenElse(hn::Lt(ax, hn::Zero(d)), hn::Mul(r, e), r);
  }
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

// Calls fn with the op for `op` (one of the structs above): code that applies
// an activation instantiates its loop once per op and picks one per call.
template <class Fn>
HWY_INLINE void visit_unary(UnaryF32 op, const UnaryF32Params& p, const Fn& fn) {
  switch (op) {
    case UnaryF32::kSqrt: return fn(SqrtOp());
    case UnaryF32::kReciprocal: return fn(ReciprocalOp());
    case UnaryF32::kNeg: return fn(NegOp());
    case UnaryF32::kAbs: return fn(AbsOp());
    case UnaryF32::kExp: return fn(ExpOp());
    case UnaryF32::kLog: return fn(LogOp());
    case UnaryF32::kErf: return fn(ErfOp());
    case UnaryF32::kTanh: return fn(TanhOp());
    case UnaryF32::kSigmoid: return fn(SigmoidOp());
    case UnaryF32::kRelu: return fn(ReluOp());
    case UnaryF32::kLeakyRelu: return fn(LeakyReluOp{p.alpha});
    case UnaryF32::kClip: return fn(ClipOp{p.lo, p.hi});
    case UnaryF32::kCos: return fn(CosOp());
    case UnaryF32::kSin: return fn(SinOp());
    case UnaryF32::kGelu: return fn(GeluOp());
    case UnaryF32::kGeluTanh: return fn(GeluTanhOp());
    case UnaryF32::kSilu: return fn(SiluOp{p.alpha});
  }
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace kiln::simd
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
