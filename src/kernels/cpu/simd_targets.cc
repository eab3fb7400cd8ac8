// Why Highway follows oneDNN's cap (simd_targets.h): kiln's packed weights,
// GEMM tiles and bf16 products all depend on the target Highway picks, and
// oneDNN's variable is the one a user (or ctest's without_avx512)
// already sets to stand in for an older CPU. Left alone, ONEDNN_MAX_CPU_ISA
// would cap the convolutions oneDNN runs and nothing else.
#include "kernels/cpu/simd_targets.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>
#include <hwy/targets.h>

namespace kiln::simd_targets {

bool onednn_has(dnnl_cpu_isa_t isa) {  // each ISA's value holds the bits of those below it
  const unsigned bits = unsigned(isa);
  return (unsigned(dnnl::get_effective_cpu_isa()) & bits) == bits;
}

bool follow_onednn_cap() {
  int64_t disabled = 0;
  if (!onednn_has(dnnl_cpu_isa_avx512_core)) disabled |= HWY_AVX3 | HWY_AVX3_DL;
  if (!onednn_has(dnnl_cpu_isa_avx2)) disabled |= HWY_AVX2;
  if (!onednn_has(dnnl_cpu_isa_sse41)) disabled |= HWY_SSE4;
  hwy::DisableTargets(disabled);
  return true;
}

std::string kiln_target() {
  const int64_t targets = hwy::SupportedTargets() & HWY_TARGETS;
  return hwy::TargetName(targets & -targets);  // the lowest bit: the best target
}

std::string onednn_isa() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41: return "sse41";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    default: return "other";
  }
}

}  // namespace kiln::simd_targets
