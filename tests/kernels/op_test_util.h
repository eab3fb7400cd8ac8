// Table-driven op tests: one OpCase per row runs the op through the eager
// executor twice, with the reference kernels and with the CPU kernels, on the
// same inputs, and compares. Adding a test is adding a row:
//
//   TEST(Elementwise, Add) {
//     check_op({"broadcast", OpKind::kAdd, {}, {f32({2, 3}), f32({3})}});
//   }
//
// Inputs are random (seeded) unless `values` is given; integer inputs that
// carry shapes/axes/indices give their values explicitly.
#pragma once

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace kiln::testing {

struct InputSpec {
  DType dtype = DType::kF32;
  Shape shape;
  std::optional<std::vector<double>> values;  // exact contents, converted to dtype
  double lo = -2, hi = 2;                      // range for random contents
  bool absent = false;                         // an omitted optional input
  double grid = 0;                             // random contents rounded to multiples of this (0: not)
};

inline InputSpec f32(Shape s, double lo = -2, double hi = 2) { return {DType::kF32, std::move(s), std::nullopt, lo, hi}; }
inline InputSpec i64_values(Shape s, std::vector<double> v) { return {DType::kI64, std::move(s), std::move(v)}; }
inline InputSpec i64_vec(std::vector<double> v) { Shape s{int64_t(v.size())}; return {DType::kI64, s, std::move(v)}; }
inline InputSpec typed(DType d, Shape s, double lo = -2, double hi = 2) { return {d, std::move(s), std::nullopt, lo, hi}; }
// f32 values that bf16 holds exactly (multiples of 1/32 in [-2, 2]: 7
// significant bits), so a kernel computing in bf16 must match the f32
// reference up to summation order.
inline InputSpec bf16_exact(Shape s) { InputSpec i = f32(std::move(s)); i.grid = 1.0 / 32; return i; }
inline InputSpec absent() { InputSpec s; s.absent = true; return s; }

struct OpCase {
  std::string label;
  OpKind op;
  Attributes attrs;
  std::vector<InputSpec> inputs;
  int num_outputs = 1;
  // CPU vs reference: max |cpu - ref| <= tolerance * max(1, max |ref|).
  double tolerance = 1e-5;
};

// Runs both kernel sets and compares every output (shape, dtype, values).
// Reports failures through gtest; returns false if either run failed.
bool check_op(const OpCase& c);
// The same comparison with the CPU kernel run in a compiled plan, its inputs
// after the first made constants (weights): the plan's passes apply, the
// first run records each step's state (packed weights, oneDNN primitives)
// and the result compared is that of a later run, which replays it.
bool check_op_in_plan(const OpCase& c);

// Runs only the reference kernels and returns the outputs (for tests that
// check the reference itself against hand-computed values).
std::vector<Tensor> run_reference(const OpCase& c);
// Likewise the CPU kernels: eagerly, or replayed in a plan as
// check_op_in_plan runs them.
std::vector<Tensor> run_cpu(const OpCase& c, bool in_plan = false);

// Heap allocations (counted by HeapCounter) of one replay of c's CPU kernel
// in a plan, built as check_op_in_plan builds it, after two runs; -1 where
// the counter is unavailable (under a sanitizer).
int64_t replay_allocations(const OpCase& c);

// Attribute helpers for rows.
Attributes attrs(std::initializer_list<std::pair<std::string, AttributeValue>> items);

}  // namespace kiln::testing
