// Figures that kiln bench and kiln profile both report: medians of timed
// runs, and the matmul peak a plan's GFLOP/s is measured against.
#pragma once

#include <optional>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/matmul_peak.h"
#include "runtime/plan.h"

namespace kiln::cli {

double median(std::vector<double> values);  // 0 for none

// The dtype a plan's products compute in: bf16 if any do (a mixed policy too).
DType product_dtype(const Plan& plan);
// The dtype whose matmul peak they are measured against: product_dtype's,
// but f32 where this CPU runs bf16 products as f32 ones on operands rounded
// through bf16 (kernels/cpu/bf16.h's Bf16Gemm::kKilnF32: no AVX512-BF16),
// whose rate f32's peak bounds; oneDNN's bf16 matmul there is an emulation.
DType peak_dtype(const Plan& plan);

// The matmul peak for `dtype` (measured once per machine, then cached; see
// kernels/cpu/matmul_peak.h), or none where oneDNN cannot time that dtype
// here (bf16 without AVX-512), which is noted on stderr.
Result<std::optional<MatmulPeak>> peak_for(DType dtype);

}  // namespace kiln::cli
