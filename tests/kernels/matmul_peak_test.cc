// The measured matmul peak (kernels/cpu/matmul_peak.h); its cache is checked
// end to end by tests/cli/bench_json.sh.
#include "kernels/cpu/matmul_peak.h"

#include <gtest/gtest.h>

#include "kernels/cpu/bf16.h"

namespace kiln {
namespace {

TEST(MatmulPeak, MeasuresEachComputeDtype) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    Result<double> gflops = measure_matmul_peak(dtype, 0.02);
    if (dtype == DType::kBF16 && !onednn_has_bf16()) {  // a CPU without AVX-512: no bf16 matmul to time
      EXPECT_EQ(gflops.status().code(), StatusCode::kUnsupported) << gflops.status().message();
      continue;
    }
    ASSERT_TRUE(gflops.ok()) << gflops.status().message();
    EXPECT_GT(*gflops, 0.1) << dtype_name(dtype);
  }
}

TEST(MatmulPeak, OtherDtypesAreUnsupported) {
  Result<double> gflops = measure_matmul_peak(DType::kI64, 0.02);
  ASSERT_FALSE(gflops.ok());
  EXPECT_EQ(gflops.status().code(), StatusCode::kUnsupported);
}

TEST(MatmulPeak, AnEmptyCachePathMeasures) {
  Result<MatmulPeak> peak = matmul_peak(DType::kF32, "");
  ASSERT_TRUE(peak.ok()) << peak.status().message();
  EXPECT_FALSE(peak->cached);
  EXPECT_NE(peak->key.find("threads"), std::string::npos);
}

}  // namespace
}  // namespace kiln
