// kiln's SIMD kernels follow oneDNN's ISA cap (simd_targets.h): whatever
// ONEDNN_MAX_CPU_ISA this runs under (ctest's without_avx512 sets AVX2),
// Highway offers no target above it, and kiln_target() names the one
// dispatch picks.
#include "kernels/cpu/simd_targets.h"

#include <gtest/gtest.h>

#include <hwy/targets.h>

namespace kiln {
namespace {

using simd_targets::onednn_has;

TEST(SimdTargets, NoneAboveOnednnCap) {
  const int64_t targets = hwy::SupportedTargets();
  SCOPED_TRACE(simd_targets::onednn_isa());
  if (!onednn_has(dnnl_cpu_isa_avx512_core)) {
    EXPECT_EQ(targets & (HWY_AVX3 | HWY_AVX3_DL), 0);
  }
  if (!onednn_has(dnnl_cpu_isa_avx2)) {
    EXPECT_EQ(targets & HWY_AVX2, 0);
  }
  // Where oneDNN runs AVX-512 (or AVX2), so does kiln: the cap takes
  // nothing the CPU and oneDNN both have.
  if (onednn_has(dnnl_cpu_isa_avx512_core)) {
    EXPECT_NE(targets & HWY_AVX3, 0);
  } else if (onednn_has(dnnl_cpu_isa_avx2)) {
    EXPECT_NE(targets & HWY_AVX2, 0);
  }
  const int64_t compiled = targets & HWY_TARGETS;
  EXPECT_EQ(simd_targets::kiln_target(), hwy::TargetName(compiled & -compiled));
}

}  // namespace
}  // namespace kiln
