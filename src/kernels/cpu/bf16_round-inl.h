// f32 -> bf16 rounding of whole vectors, per Highway target: bf16.cc's
// buffer loops, gemm.cc's packing of bf16 operands and bf16 attention's
// probabilities. Include it after <hwy/foreach_target.h> (it is re-included
// once per target).
// NOLINTBEGIN(llvm-header-guard): Highway's per-target include guard
#if defined(KILN_KERNELS_CPU_BF16_ROUND_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KILN_KERNELS_CPU_BF16_ROUND_INL_H_
#undef KILN_KERNELS_CPU_BF16_ROUND_INL_H_
#else
#define KILN_KERNELS_CPU_BF16_ROUND_INL_H_
#endif
// NOLINTEND(llvm-header-guard)

#include <hwy/highway.h>

#include "core/dtype.h"

HWY_BEFORE_NAMESPACE();
namespace kiln::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Each lane of v rounded to bf16 as f32_to_bf16 rounds (to nearest even; a
// NaN stays a quiet NaN): the bf16's bits in the low 16 bits of each lane,
// zeros above.
template <class D>
HWY_INLINE hn::Vec<hn::RebindToSigned<D>> Bf16Bits(D d, hn::Vec<D> v) {
  (void)d;
  const hn::RebindToSigned<D> di;
  const auto bits = hn::BitCast(di, v);
  const auto odd = hn::And(hn::ShiftRight<16>(bits), hn::Set(di, 1));
  auto rounded = hn::ShiftRight<16>(hn::Add(bits, hn::Add(hn::Set(di, 0x7FFF), odd)));
  const auto quiet_nan = hn::Or(hn::ShiftRight<16>(bits), hn::Set(di, 0x40));
  rounded = hn::IfThenElse(hn::RebindMask(di, hn::IsNaN(v)), quiet_nan, rounded);
  // Only the low 16 bits: the shifts are arithmetic, so a negative v's
  // sign fills the rest.
  return hn::And(rounded, hn::Set(di, 0xFFFF));
}

// v rounded to bf16 (Bf16Bits), its lanes stored at out.
template <class D>
HWY_INLINE void StoreBf16(D d, hn::Vec<D> v, bf16* out) {
  const hn::Rebind<uint16_t, D> d16;
  hn::StoreU(hn::DemoteTo(d16, Bf16Bits(d, v)), d16, reinterpret_cast<uint16_t*>(out));
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace kiln::simd
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
