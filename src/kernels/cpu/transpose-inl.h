// A 16 x 16 block of 32-bit lanes turned around in registers (AVX-512
// targets): attention's packing of Q's rows (attention_simd.cc) and bf16
// packing of a Kᵀ whose pairs of rows are adjacent floats (gemm.cc). In 64
// shuffles, against 16 gathers of 16 scattered lanes. Include it after
// <hwy/foreach_target.h> (it is re-included once per target); Transpose16
// exists where KILN_TRANSPOSE16 is true.
// NOLINTBEGIN(llvm-header-guard): Highway's per-target include guard
#if defined(KILN_KERNELS_CPU_TRANSPOSE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KILN_KERNELS_CPU_TRANSPOSE_INL_H_
#undef KILN_KERNELS_CPU_TRANSPOSE_INL_H_
#else
#define KILN_KERNELS_CPU_TRANSPOSE_INL_H_
#endif
// NOLINTEND(llvm-header-guard)

#include <hwy/highway.h>

#ifndef KILN_TRANSPOSE16
#define KILN_TRANSPOSE16 (HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3)
#endif

HWY_BEFORE_NAMESPACE();
namespace kiln::simd {
namespace HWY_NAMESPACE {

#if KILN_TRANSPOSE16
// r[i] holds row i of a 16 x 16 block; afterwards r[j] holds column j.
HWY_INLINE void Transpose16(__m512 (&r)[16]) {
  __m512 a[16];
  for (int k = 0; k < 16; k += 2) {  // pairs of rows, interleaved within each 128-bit block
    a[k] = _mm512_unpacklo_ps(r[k], r[k + 1]);
    a[k + 1] = _mm512_unpackhi_ps(r[k], r[k + 1]);
  }
  for (int k = 0; k < 16; k += 4) {  // block L of r[k + c]: column 4L + c of rows k .. k + 3
    const __m512d a0 = _mm512_castps_pd(a[k]), a1 = _mm512_castps_pd(a[k + 1]);
    const __m512d a2 = _mm512_castps_pd(a[k + 2]), a3 = _mm512_castps_pd(a[k + 3]);
    r[k] = _mm512_castpd_ps(_mm512_unpacklo_pd(a0, a2));
    r[k + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a0, a2));
    r[k + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(a1, a3));
    r[k + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(a1, a3));
  }
  for (int c = 0; c < 4; ++c) {  // a 4 x 4 transpose of 128-bit blocks, block (k, L) to (L, k)
    const __m512 even01 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x88);
    const __m512 odd01 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xdd);
    const __m512 even23 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x88);
    const __m512 odd23 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xdd);
    a[c] = _mm512_shuffle_f32x4(even01, even23, 0x88);
    a[8 + c] = _mm512_shuffle_f32x4(even01, even23, 0xdd);
    a[4 + c] = _mm512_shuffle_f32x4(odd01, odd23, 0x88);
    a[12 + c] = _mm512_shuffle_f32x4(odd01, odd23, 0xdd);
  }
  for (int j = 0; j < 16; ++j) r[j] = a[j];
}
#endif

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace kiln::simd
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
