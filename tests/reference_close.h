// The tolerance the model tests hold kiln's networks to against PyTorch's
// outputs (tools/make_tiny_checkpoints.py, make_tiny_wan.py), and the check
// of a network run both ways.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "core/tensor.h"
#include "runtime/eager_executor.h"
#include "runtime/plan.h"

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

// `graph` compiled for the shapes of `inputs`, which are bound to it.
inline Result<std::unique_ptr<Plan>> compile_bound(Graph graph, const NamedTensors& inputs) {
  std::vector<std::pair<std::string, Shape>> signature;
  for (const auto& [name, t] : inputs) signature.emplace_back(name, t.shape());
  KILN_ASSIGN_OR_RETURN(auto dims, input_dims(graph, signature));
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Plan> plan, Plan::compile(std::move(graph), {.dims = dims}));
  for (const auto& [name, t] : inputs) KILN_RETURN_IF_ERROR(plan->bind_input(name, t.view()));
  return plan;
}

// `graph` run eagerly and as a plan on `inputs`: output 0 each time close to `expected`.
inline void expect_both_ways_close(const std::string& what, Graph graph, const NamedTensors& inputs,
                                   const Tensor& expected) {
  {
    EagerExecutor exec(graph);
    auto out = exec.run(inputs);
    ASSERT_TRUE(out.ok()) << out.status().message();
    expect_close(what + " eager", (*out)[0].view(), expected);
  }
  auto plan = compile_bound(std::move(graph), inputs);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  ASSERT_TRUE((*plan)->run().ok());
  expect_close(what + " graph", (*plan)->output(0), expected);
}

}  // namespace kiln::testing
