// Highway per-target loops behind kernels/cpu/elementwise_simd.h. This file is
// compiled once per SIMD target (foreach_target.h re-includes it).
#include "kernels/cpu/elementwise_simd.h"

#include <algorithm>

#include "kernels/cpu/simd_targets.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/elementwise_simd.cc"
#include <hwy/foreach_target.h>  // must precede highway.h

#include <hwy/highway.h>

#include "kernels/cpu/unary_ops-inl.h"

HWY_BEFORE_NAMESPACE();
namespace kiln::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

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
  visit_unary(op, p, [&](const auto& f) { unary_loop(x, y, n, f); });
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
