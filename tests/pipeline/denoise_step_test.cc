// kiln.DenoiseStep: the CPU kernel against the reference (eagerly and in a
// plan, with its counter and coefficient table as constants), and in place:
// a plan whose outputs are bound over the inputs they update, run three
// times in one call, walks three steps of the schedule.
#include <gtest/gtest.h>

#include <vector>

#include "../kernels/op_test_util.h"
#include "kernels/denoise_update.h"
#include "runtime/eager_executor.h"
#include "runtime/plan.h"

namespace kiln::testing {
namespace {

// Coefficient rows c_x, c_out, c_prev, c_noise, d_x, d_out for 4 steps.
std::vector<double> coefficient_table(bool noise) {
  std::vector<double> t;
  for (int row = 0; row < kDenoiseCoefficientRows; ++row)
    for (int step = 0; step < 4; ++step) t.push_back(row == 3 && !noise ? 0.0 : 0.1 * (row + 1) + 0.05 * step);
  return t;
}

OpCase denoise_case(const std::string& label, double step, bool noise) {
  Attributes a = attrs({{"noise_first_pair", int64_t(8)}});
  return {label, OpKind::kDenoiseStep, a,
          {f32({2, 4, 3, 3}), f32({2, 4, 3, 3}), f32({2, 4, 3, 3}), i64_values({}, {step}),
           {DType::kF32, {kDenoiseCoefficientRows, 4}, coefficient_table(noise)}, i64_values({}, {5})},
          3};
}

TEST(DenoiseStep, MatchesTheReference) {
  for (double step : {0.0, 3.0}) {
    check_op(denoise_case("deterministic", step, false));
    check_op(denoise_case("ancestral noise", step, true));
    check_op_in_plan(denoise_case("in a plan", step, true));
  }
}

// kiln.UniPcStep likewise: 9 coefficient rows for 4 steps.
OpCase unipc_case(const std::string& label, double step) {
  std::vector<double> table;
  for (int row = 0; row < kUniPcCoefficientRows; ++row)
    for (int s = 0; s < 4; ++s) table.push_back(0.3 - 0.07 * row + 0.05 * s);
  return {label, OpKind::kUniPcStep, {},
          {f32({2, 3, 2, 4}), f32({2, 3, 2, 4}), f32({2, 3, 2, 4}), f32({2, 3, 2, 4}), f32({2, 3, 2, 4}),
           i64_values({}, {step}), {DType::kF32, {kUniPcCoefficientRows, 4}, table}},
          5};
}

TEST(UniPcStep, MatchesTheReference) {
  for (double step : {0.0, 3.0}) {
    check_op(unipc_case("eager", step));
    check_op_in_plan(unipc_case("in a plan", step));
  }
}

TEST(DenoiseStep, RejectsAStepOutsideTheSchedule) {
  Graph g;
  Value* x = g.add_input("x", DType::kF32, SymShape{2});
  Value* step = g.add_input("step", DType::kI64, SymShape{});
  Value* table = g.add_constant(
      "coefficients", *Tensor::from_vector<float>({kDenoiseCoefficientRows, 1}, std::vector<float>(6, 1.0f)));
  Value *next = g.add_value("x_next"), *x0 = g.add_value("x0"), *step_next = g.add_value("step_next");
  Value* seed = g.add_constant("seed", *Tensor::from_vector<int64_t>({}, {0}));
  g.add_node(OpKind::kDenoiseStep, "step", {x, x, x, step, table, seed}, {next, x0, step_next});
  for (Value* v : {next, x0, step_next}) g.mark_output(v);
  EagerExecutor exec(g);
  auto out = exec.run({{"x", *Tensor::from_vector<float>({2}, {1, 2})}, {"step", *Tensor::from_vector<int64_t>({}, {1})}});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("outside the schedule"), std::string::npos) << out.status().message();
}

// x_next = 0.5 x + s * out with out = x (so x <- (0.5 + s) x at step s), x0 = x.
TEST(DenoiseStep, RunsInPlaceAcrossRepeatedPlanRuns) {
  Graph g;
  Value* x = g.add_input("x", DType::kF32, SymShape{4});
  Value* prev = g.add_input("x0_prev", DType::kF32, SymShape{4});
  Value* step = g.add_input("step", DType::kI64, SymShape{});
  std::vector<float> table(kDenoiseCoefficientRows * 3, 0.0f);
  for (int s = 0; s < 3; ++s) {
    table[0 * 3 + s] = 0.5f;        // c_x
    table[1 * 3 + s] = float(s);    // c_out: the step index, read from the table at run time
    table[4 * 3 + s] = 1.0f;        // d_x: x0 = x
  }
  Value* coefficients = g.add_constant("coefficients", *Tensor::from_vector<float>({kDenoiseCoefficientRows, 3}, table));
  Value *next = g.add_value("x_next"), *x0 = g.add_value("x0"), *step_next = g.add_value("step_next");
  Value* seed = g.add_constant("seed", *Tensor::from_vector<int64_t>({}, {0}));
  g.add_node(OpKind::kDenoiseStep, "step", {x, x, prev, step, coefficients, seed}, {next, x0, step_next});
  for (Value* v : {next, x0, step_next}) g.mark_output(v);
  auto plan = Plan::compile(std::move(g), {});
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  std::vector<float> xs = {1, 2, 3, 4}, x0s(4, 0.0f);
  int64_t counter = 0;
  TensorView xv{DType::kF32, {4}, xs.data()}, pv{DType::kF32, {4}, x0s.data()}, sv{DType::kI64, {}, &counter};
  ASSERT_TRUE((*plan)->bind_input("x", xv).ok());
  ASSERT_TRUE((*plan)->bind_input("x0_prev", pv).ok());
  ASSERT_TRUE((*plan)->bind_input("step", sv).ok());
  ASSERT_TRUE((*plan)->bind_output("x_next", xv).ok());
  ASSERT_TRUE((*plan)->bind_output("x0", pv).ok());
  ASSERT_TRUE((*plan)->bind_output("step_next", sv).ok());
  std::vector<int64_t> seen;
  ASSERT_TRUE((*plan)->run_repeated(3, [&](int64_t done) {
    seen.push_back(done);
    return ok_status();
  }).ok());
  EXPECT_EQ(counter, 3);
  EXPECT_EQ(seen, (std::vector<int64_t>{1, 2, 3}));
  // Step s: x <- (0.5 + s) x, so x = 1 * 0.5 * 1.5 * 2.5 = 1.875 x_start;
  // x0 is the x that entered the last step: 0.75 x_start.
  EXPECT_FLOAT_EQ(xs[3], 4 * 1.875f);
  EXPECT_FLOAT_EQ(x0s[3], 4 * 0.75f);
  EXPECT_EQ((*plan)->output_copy_bytes(), 0u);
}

}  // namespace
}  // namespace kiln::testing
