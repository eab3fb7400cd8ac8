// round_to_bf16 and round_through_bf16 are Highway per-target loops (this
// file is compiled once per SIMD target; foreach_target.h re-includes it):
// compiled for the baseline x86-64 alone, f32_to_bf16's loop vectorized to
// SSE2 shuffles, and rounding the A operands of dit_small's bf16 Linears was
// a visible share of its profile; what is left is mostly waiting on the loads
// (measurements: docs/performance.md#bf16-rounding).
#include "kernels/cpu/bf16.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/bf16.cc"
#include <hwy/foreach_target.h>  // must precede highway.h

#include <hwy/highway.h>

#include "kernels/cpu/bf16_round-inl.h"

HWY_BEFORE_NAMESPACE();
namespace kiln::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using simd::HWY_NAMESPACE::Bf16Bits;
using simd::HWY_NAMESPACE::StoreBf16;

void RoundToBf16(const float* x, bf16* dst, int64_t begin, int64_t end) {
  const hn::ScalableTag<float> d;
  const int64_t lanes = int64_t(hn::Lanes(d));
  int64_t i = begin;
  for (; i + lanes <= end; i += lanes) StoreBf16(d, hn::LoadU(d, x + i), dst + i);
  for (; i < end; ++i) dst[i] = f32_to_bf16(x[i]);
}

void RoundThroughBf16(const float* x, float* dst, int64_t begin, int64_t end) {
  const hn::ScalableTag<float> d;
  const int64_t lanes = int64_t(hn::Lanes(d));
  int64_t i = begin;
  for (; i + lanes <= end; i += lanes)
    hn::StoreU(hn::BitCast(d, hn::ShiftLeft<16>(Bf16Bits(d, hn::LoadU(d, x + i)))), d, dst + i);
  for (; i < end; ++i) dst[i] = bf16_to_f32(f32_to_bf16(x[i]));
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace kiln::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <oneapi/dnnl/dnnl.hpp>

#include <cstdlib>
#include <optional>
#include <string>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd_targets.h"

namespace kiln {

HWY_EXPORT(RoundToBf16);
HWY_EXPORT(RoundThroughBf16);

void round_to_bf16(const float* x, bf16* dst, int64_t n, bool parallel) {
  parallel_ranges(n, parallel && n >= kParallelMinElements,
                  [&](int64_t begin, int64_t end) { HWY_DYNAMIC_DISPATCH(RoundToBf16)(x, dst, begin, end); });
}

void round_through_bf16(const float* x, float* dst, int64_t n, bool parallel) {
  parallel_ranges(n, parallel && n >= kParallelMinElements,
                  [&](int64_t begin, int64_t end) { HWY_DYNAMIC_DISPATCH(RoundThroughBf16)(x, dst, begin, end); });
}

Result<void*> rounded_copy(KernelContext& ctx, size_t index) {
  const TensorView& in = *ctx.input(index);
  if (!onednn_has_bf16()) {
    KILN_ASSIGN_OR_RETURN(const float* copy, rounded_f32_copy(ctx, in.as<float>(), in.numel()));
    return const_cast<float*>(copy);
  }
  void* data = ctx.workspace ? ctx.workspace->scratch(size_t(in.numel()) * sizeof(bf16)) : nullptr;
  if (!data) return resource_exhausted("{}: no scratch for a bf16 operand", node_label(*ctx.node));
  round_to_bf16(in.as<float>(), static_cast<bf16*>(data), in.numel(), true);
  return data;
}

Result<const float*> rounded_f32_copy(KernelContext& ctx, const float* x, int64_t n) {
  auto* copy = ctx.workspace ? static_cast<float*>(ctx.workspace->scratch(size_t(n) * sizeof(float))) : nullptr;
  if (!copy) return resource_exhausted("{}: no scratch for a bf16 operand", node_label(*ctx.node));
  round_through_bf16(x, copy, n, true);
  return static_cast<const float*>(copy);
}

bool onednn_has_bf16() {
  static const bool has = [] {
    try {
      using dnnl::memory;
      const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
      const memory::desc a({16, 16}, memory::data_type::bf16, memory::format_tag::ab);
      const memory::desc y({16, 16}, memory::data_type::f32, memory::format_tag::ab);
      dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, a, y), engine);
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return has;
}

namespace {

constexpr const char* kBf16GemmVariable = "KILN_BF16_GEMM";

// KILN_BF16_GEMM's choice: nullopt for auto (unset or empty too), or an
// error naming a value it does not know.
Result<std::optional<Bf16Gemm>> bf16_gemm_setting() {
  const char* value = std::getenv(kBf16GemmVariable);
  const std::string_view v = value ? value : "";
  if (v.empty() || v == "auto") return std::optional<Bf16Gemm>();
  if (v == "kiln") return std::optional<Bf16Gemm>(gemm::has_bf16_products() ? Bf16Gemm::kKiln : Bf16Gemm::kKilnF32);
  if (v == "onednn") return std::optional<Bf16Gemm>(Bf16Gemm::kOnednn);
  return invalid_argument("{}={}: expected auto, kiln or onednn", kBf16GemmVariable, v);
}

// Whether oneDNN runs AMX tiles here (and so takes bf16 products at several
// times the rate kiln's GEMM does).
bool onednn_has_amx() { return simd_targets::onednn_has(dnnl_cpu_isa_avx512_core_amx); }

// bf16_gemm()'s choice, and why it was made.
struct Bf16GemmChoice {
  Bf16Gemm gemm;
  const char* why;
};

const Bf16GemmChoice& bf16_gemm_choice() {
  static const Bf16GemmChoice chosen = []() -> Bf16GemmChoice {
    const Result<std::optional<Bf16Gemm>> setting = bf16_gemm_setting();
    if (setting.ok() && setting->has_value()) return {**setting, "set by KILN_BF16_GEMM"};
    if (!gemm::has_bf16_products())
      return {Bf16Gemm::kKilnF32, "no AVX512-BF16 on this CPU, or ONEDNN_MAX_CPU_ISA below it"};
    if (gemm::has_amx_products()) return {Bf16Gemm::kKiln, "AMX tiles"};
    if (onednn_has_amx()) return {Bf16Gemm::kOnednn, "AMX, its tile state not granted to kiln"};
    return {Bf16Gemm::kKiln, "AVX512-BF16, no AMX"};
  }();
  return chosen;
}

}  // namespace

Bf16Gemm bf16_gemm() { return bf16_gemm_choice().gemm; }

std::string_view bf16_gemm_name(Bf16Gemm gemm) {
  switch (gemm) {
    case Bf16Gemm::kKiln: return "kiln";
    case Bf16Gemm::kKilnF32: return "kiln_f32";
    case Bf16Gemm::kOnednn: break;
  }
  return "onednn";
}

std::string describe_bf16_gemm() {
  const Bf16GemmChoice& c = bf16_gemm_choice();
  const char* what = c.gemm == Bf16Gemm::kKiln      ? "kiln's GEMM"
                     : c.gemm == Bf16Gemm::kKilnF32 ? "kiln's f32 GEMM on operands rounded through bf16"
                                                    : "oneDNN's primitives";
  return fmt::format("{} ({})", what, c.why);
}

Status check_bf16_gemm_setting() { return bf16_gemm_setting().status(); }

}  // namespace kiln
#endif  // HWY_ONCE
