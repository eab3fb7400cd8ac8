#include "kernels/cpu/widen.h"

#include <cstring>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/widen.cc"
#include <hwy/foreach_target.h>  // must precede highway.h

#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace kiln::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void WidenF16(const f16* src, float* dst, int64_t begin, int64_t end) {
  const hn::ScalableTag<float> d;
  const hn::Rebind<hwy::float16_t, decltype(d)> dh;
  const int64_t lanes = int64_t(hn::Lanes(d));
  const auto* in = reinterpret_cast<const hwy::float16_t*>(src);
  int64_t i = begin;
  for (; i + lanes <= end; i += lanes) hn::StoreU(hn::PromoteTo(d, hn::LoadU(dh, in + i)), d, dst + i);
  for (; i < end; ++i) dst[i] = f16_to_f32(src[i]);
}

void WidenBf16(const bf16* src, float* dst, int64_t begin, int64_t end) {
  // A bf16 is an f32's upper half: shift it into place.
  const hn::ScalableTag<float> d;
  const hn::RebindToUnsigned<decltype(d)> du;
  const hn::Rebind<uint16_t, decltype(d)> du16;
  const int64_t lanes = int64_t(hn::Lanes(d));
  const auto* in = reinterpret_cast<const uint16_t*>(src);
  int64_t i = begin;
  for (; i + lanes <= end; i += lanes)
    hn::StoreU(hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(du16, in + i)))), d, dst + i);
  for (; i < end; ++i) dst[i] = bf16_to_f32(src[i]);
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace kiln::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kernels/cpu/parallel.h"

namespace kiln {

HWY_EXPORT(WidenF16);
HWY_EXPORT(WidenBf16);

void widen_to_f32(const f16* src, float* dst, int64_t n) {
  parallel_ranges(n, n >= kParallelMinElements,
                  [&](int64_t begin, int64_t end) { HWY_DYNAMIC_DISPATCH(WidenF16)(src, dst, begin, end); });
}

void widen_to_f32(const bf16* src, float* dst, int64_t n) {
  parallel_ranges(n, n >= kParallelMinElements,
                  [&](int64_t begin, int64_t end) { HWY_DYNAMIC_DISPATCH(WidenBf16)(src, dst, begin, end); });
}

Result<Tensor> widened_to_f32(const TensorView& v) {
  KILN_ASSIGN_OR_RETURN(Tensor wide, Tensor::empty(DType::kF32, v.shape));
  switch (v.dtype) {
    case DType::kF16: widen_to_f32(v.as<f16>(), wide.data<float>(), v.numel()); break;
    case DType::kBF16: widen_to_f32(v.as<bf16>(), wide.data<float>(), v.numel()); break;
    case DType::kF32: std::memcpy(wide.raw(), v.data, v.nbytes()); break;
    default: return unsupported("a {} tensor cannot be widened to f32", dtype_name(v.dtype));
  }
  return wide;
}

}  // namespace kiln
#endif  // HWY_ONCE
