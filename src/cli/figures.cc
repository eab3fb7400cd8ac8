#include "cli/figures.h"

#include <fmt/format.h>

#include <algorithm>

#include "kernels/cpu/bf16.h"

namespace kiln::cli {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

DType product_dtype(const Plan& plan) {
  return plan.stats().passes.counts.count("assign_precision") ? DType::kBF16 : DType::kF32;
}

DType peak_dtype(const Plan& plan) {
  const DType dtype = product_dtype(plan);
  return dtype == DType::kBF16 && bf16_gemm() == Bf16Gemm::kKilnF32 ? DType::kF32 : dtype;
}

Result<std::optional<MatmulPeak>> peak_for(DType dtype) {
  auto measured = matmul_peak(dtype, default_peak_cache_path());
  if (measured.ok()) return std::optional<MatmulPeak>(*measured);
  if (measured.status().code() != StatusCode::kUnsupported) return measured.status();
  fmt::print(stderr, "kiln: note: no peak: {}\n", measured.status().message());
  return std::optional<MatmulPeak>();
}

}  // namespace kiln::cli
