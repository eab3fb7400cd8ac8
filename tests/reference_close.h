// The tolerance the model tests hold kiln's networks to against PyTorch's
// outputs (tools/make_tiny_checkpoints.py, make_tiny_wan.py).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "core/tensor.h"

namespace kiln::testing {

// max |err| <= tolerance * max |reference| (a NaN fails), f32.
inline void expect_close(const std::string& what, const TensorView& got, const Tensor& expected,
                         double tolerance = 1e-4) {
  ASSERT_EQ(got.shape, expected.shape()) << what;
  double max_ref = 0, max_err = 0;
  for (int64_t k = 0; k < got.numel(); ++k) {
    const double e = expected.data<float>()[k], g = got.as<float>()[k];
    max_ref = std::max(max_ref, std::abs(e));
    max_err = std::max(max_err, std::isnan(g) ? INFINITY : std::abs(e - g));
  }
  EXPECT_LE(max_err, tolerance * max_ref) << what << ": max |err| " << max_err << ", max |ref| " << max_ref;
}

}  // namespace kiln::testing
