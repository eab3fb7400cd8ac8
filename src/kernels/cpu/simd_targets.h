// kiln's own SIMD kernels (Highway's dynamic dispatch: gemm, attention,
// elementwise, reductions, Winograd, bf16 rounding) follow oneDNN's ISA cap,
// so that ONEDNN_MAX_CPU_ISA alone makes a run what it would be on a CPU
// without the capped extensions, every kernel included:
//
//   ONEDNN_MAX_CPU_ISA=AVX2 kiln run model.onnx   # no AVX-512 anywhere
//
// Every file that exports Highway kernels includes this header, so the cap
// applies before main() in any program that can call one (the CLI, the
// tests, the benchmarks). Without the variable nothing is disabled: each
// library picks the best its CPU has.
#pragma once

#include <oneapi/dnnl/dnnl_types.h>

#include <string>

namespace kiln::simd_targets {

// Disables Highway's targets above oneDNN's effective ISA (AVX-512 targets
// below avx512_core, AVX2 below avx2, SSE4 below sse41). Idempotent; returns
// true so that it can initialize the variable below.
bool follow_onednn_cap();
inline const bool kFollowsOnednnCap = follow_onednn_cap();

// Whether oneDNN may run `isa` (dnnl_cpu_isa_avx512_core_bf16, ...): the
// CPU has it and ONEDNN_MAX_CPU_ISA does not cap it.
bool onednn_has(dnnl_cpu_isa_t isa);

// The target Highway's dispatch picks now, as Highway names it ("AVX3",
// "AVX2", ...), and oneDNN's effective ISA ("avx512_core_bf16", ...): what
// `kiln bench` reports.
std::string kiln_target();
std::string onednn_isa();

}  // namespace kiln::simd_targets
