// Elementwise ops: CPU kernels against the reference (every op, broadcasting
// patterns that hit each row layout, every supported dtype, special values),
// the reference against hand-computed values, inference with symbolic shapes,
// and invalid nodes.
#include <cmath>
#include <limits>

#include "ir/shape_inference.h"
#include "op_test_util.h"
#include "runtime/eager_executor.h"

namespace kiln::testing {
namespace {

const DType kAllDTypes[] = {DType::kF32, DType::kF64, DType::kF16, DType::kBF16, DType::kI64,
                            DType::kI32, DType::kI8,  DType::kU8,  DType::kBool};
const DType kIntDTypes[] = {DType::kI64, DType::kI32, DType::kI8, DType::kU8};

// f32 rounds once like the reference; 16-bit floats are computed in f32 and
// rounded, which may differ from the reference's single rounding by an ulp.
double tolerance_of(DType d) {
  switch (d) {
    case DType::kF16: return 2e-3;
    case DType::kBF16: return 1.6e-2;
    default: return 0;
  }
}

// Random contents the dtype can hold (u8 gets a non-negative range).
InputSpec operand(DType d, Shape s, double lo = -3, double hi = 3) {
  if (d == DType::kU8) lo = std::max(lo, 0.0), hi = std::clamp(hi, 8.0, 255.0);
  if (d == DType::kI8) lo = std::max(lo, -128.0), hi = std::min(hi, 127.0);
  return typed(d, std::move(s), lo, hi);
}
InputSpec values(DType d, Shape s, std::vector<double> v) {
  return {d, std::move(s), std::move(v)};
}

// Operand shape pairs, one per row layout the CPU kernels take: one long row,
// a repeated scalar on either side, a bias over the last axis, a bias in the
// middle, an outer product, many short rows, 0-size, rank 0, and outputs big
// enough to be split over threads (whole rows and pieces of a row).
const std::vector<std::pair<Shape, Shape>> kBroadcasts = {
    {{2, 3, 4}, {2, 3, 4}},
    {{2, 3, 4}, {}},
    {{}, {2, 3, 4}},
    {{2, 3, 4}, {4}},
    {{2, 3, 4, 5}, {3, 1, 1}},
    {{4, 1}, {1, 5}},
    {{1, 5}, {4, 1}},
    {{2, 1, 4}, {1, 3, 1}},
    {{5000, 3}, {5000, 1}},
    {{0, 3}, {3}},
    {{}, {}},
    {{1, 17}, {17}},
    {{64, 1500}, {1500}},
    {{3, 1, 70000}, {3, 5, 1}},
    {{270001}, {270001}},
};

std::string shape_label(const Shape& a, const Shape& b) {
  return shape_to_string(a) + "x" + shape_to_string(b);
}

void check_binary(OpKind op, DType d, double lo = -3, double hi = 3) {
  for (const auto& [sa, sb] : kBroadcasts) {
    if (shape_numel(sa) * 2 > 300000 && d != DType::kF32) continue;  // big rows: f32 only
    OpCase c{
        std::string(op_name(op)) + " " + std::string(dtype_name(d)) + " " + shape_label(sa, sb),
        op,
        {},
        {operand(d, sa, lo, hi), operand(d, sb, lo, hi)}};
    c.tolerance = tolerance_of(d);
    check_op(c);
  }
}

TEST(Elementwise, ArithmeticF32) {
  for (OpKind op :
       {OpKind::kAdd, OpKind::kSub, OpKind::kMul, OpKind::kDiv, OpKind::kMin, OpKind::kMax})
    check_binary(op, DType::kF32);
}

TEST(Elementwise, ArithmeticOtherDTypes) {
  for (DType d :
       {DType::kF64, DType::kF16, DType::kBF16, DType::kI64, DType::kI32, DType::kI8, DType::kU8})
    for (OpKind op :
         {OpKind::kAdd, OpKind::kSub, OpKind::kMul, OpKind::kDiv, OpKind::kMin, OpKind::kMax})
      check_binary(op, d, -100, 100);
}

// Shape arithmetic of exported models: 1-element int64 tensors.
TEST(Elementwise, ShapeArithmetic) {
  for (OpKind op : {OpKind::kAdd, OpKind::kSub, OpKind::kMul, OpKind::kDiv}) {
    check_op({"i64 scalar", op, {}, {i64_values({}, {77}), i64_values({}, {8})}});
    check_op({"i64 [1]", op, {}, {i64_values({1}, {-77}), i64_values({1}, {8})}});
    check_op({"i64 [4] by [1]", op, {}, {i64_vec({1, 64, 64, 320}), i64_vec({2})}});
  }
}

TEST(Elementwise, IntegerEdgeCases) {
  const double kMin64 = -9223372036854775808.0;
  for (DType d : {DType::kI64, DType::kI32, DType::kI8}) {
    const double lo = d == DType::kI64 ? kMin64 : d == DType::kI32 ? -2147483648.0 : -128;
    // Division by 0 and -1, MIN / -1, overflowing products and sums.
    InputSpec a = values(d, {8}, {7, -7, 7, -7, 5, lo, lo, -1});
    InputSpec b = values(d, {8}, {2, 2, -2, -2, 0, -1, 2, -1});
    for (OpKind op : {OpKind::kAdd, OpKind::kSub, OpKind::kMul, OpKind::kDiv})
      check_op({"edges", op, {}, {a, b}});
    check_op({"neg MIN", OpKind::kNeg, {}, {a}});
    check_op({"abs MIN", OpKind::kAbs, {}, {a}});
  }
}

TEST(Elementwise, Variadic) {
  for (OpKind op : {OpKind::kMin, OpKind::kMax}) {
    for (DType d : {DType::kF32, DType::kF64, DType::kI64, DType::kI32, DType::kU8}) {
      check_op({"one", op, {}, {operand(d, {3, 4})}});
      check_op({"three", op, {}, {operand(d, {3, 1}), operand(d, {4}), operand(d, {2, 1, 1})}});
      check_op({"four big",
                op,
                {},
                {operand(d, {40000}), operand(d, {}), operand(d, {40000}), operand(d, {1})}});
    }
    OpCase half{"f16 two", op, {}, {operand(DType::kF16, {5, 3}), operand(DType::kF16, {3})}};
    check_op(half);
    // NaN in either operand propagates.
    const double nan = std::nan("");
    check_op({"nan",
              op,
              {},
              {values(DType::kF32, {20}, {nan, 1, 2, nan, -1}),
               values(DType::kF32, {20}, {1, nan, 3, nan})}});
  }
}

TEST(Elementwise, Pow) {
  // Base and exponent dtypes as the ONNX Pow tests combine them.
  const std::pair<DType, DType> kTypes[] = {{DType::kF32, DType::kF32}, {DType::kF32, DType::kI64},
                                            {DType::kF32, DType::kI32}, {DType::kF64, DType::kF64},
                                            {DType::kI64, DType::kI64}, {DType::kI32, DType::kI32},
                                            {DType::kI64, DType::kF32}, {DType::kI32, DType::kF32},
                                            {DType::kF16, DType::kF16}, {DType::kF32, DType::kU8}};
  for (const auto& [da, db] : kTypes) {
    std::string label = std::string(dtype_name(da)) + "^" + std::string(dtype_name(db));
    OpCase c{label, OpKind::kPow, {}, {operand(da, {3, 4}, 0.5, 4), operand(db, {4}, -2, 3)}};
    c.tolerance = std::max(1e-6, tolerance_of(da));
    check_op(c);
  }
  // Scalar exponents with cheaper exact forms, and one without.
  for (double e : {2.0, 0.5, 1.0, 3.0, -1.5}) {
    OpCase c{
        "scalar exponent", OpKind::kPow, {}, {f32({100003}, 0, 5), values(DType::kF32, {}, {e})}};
    c.tolerance = 1e-6;
    check_op(c);
  }
  check_op({"i64 negative exponents",
            OpKind::kPow,
            {},
            {values(DType::kI64, {6}, {1, -1, -1, 2, 0, 3}),
             values(DType::kI64, {6}, {-3, -3, -2, -1, 5, 41})}});
}

TEST(Elementwise, Comparisons) {
  for (OpKind op : {OpKind::kEqual, OpKind::kLess, OpKind::kGreater}) {
    for (DType d : {DType::kF32, DType::kF64, DType::kF16, DType::kI64, DType::kI32, DType::kI8,
                    DType::kU8}) {
      // Few distinct values, so that ties occur.
      check_op(
          {"same", op, {}, {values(d, {3, 7}, {0, 1, 2, 3, 2}), values(d, {3, 7}, {2, 1, 0})}});
      check_op({"bcast", op, {}, {values(d, {4, 1}, {1, 2, 3, 4}), values(d, {1, 5}, {3, 2, 1})}});
      check_op({"scalar", op, {}, {values(d, {}, {2}), values(d, {70000}, {1, 2, 3})}});
    }
  }
  check_op({"bool", OpKind::kEqual, {}, {typed(DType::kBool, {6}), typed(DType::kBool, {2, 1})}});
}

struct UnaryCase {
  OpKind op;
  double lo, hi;     // random input range, inside the op's domain
  double tolerance;  // f32 CPU against the f64 reference
  Attributes attrs = {};
};
const UnaryCase kUnary[] = {
    {OpKind::kSqrt, 0, 100, 1e-6},     {OpKind::kReciprocal, 0.1, 5, 1e-6},
    {OpKind::kNeg, -3, 3, 0},          {OpKind::kAbs, -3, 3, 0},
    {OpKind::kExp, -20, 5, 2e-6},      {OpKind::kLog, 1e-3, 1e3, 1e-6},
    {OpKind::kErf, -5, 5, 1e-6},       {OpKind::kTanh, -10, 10, 1e-6},
    {OpKind::kSigmoid, -20, 20, 1e-6}, {OpKind::kRelu, -3, 3, 0},
    {OpKind::kLeakyRelu, -3, 3, 1e-7}, {OpKind::kCos, -50, 50, 1e-6},
    {OpKind::kSin, -50, 50, 1e-6},     {OpKind::kLeakyRelu, -3, 3, 1e-7, attrs({{"alpha", 0.2f}})},
};
// The fused activations (f32 only; the GEMM epilogue's too), on the same loops.
const UnaryCase kFusedActivations[] = {
    {OpKind::kSilu, -20, 20, 1e-6},
    {OpKind::kSilu, -8, 8, 1e-6, attrs({{"alpha", 1.702f}})},
    {OpKind::kGelu, -10, 10, 1e-6},
    {OpKind::kGelu, -10, 10, 1e-6, attrs({{"approximate", std::string("tanh")}})},
};
std::vector<UnaryCase> f32_unary_cases() {
  std::vector<UnaryCase> cases(std::begin(kUnary), std::end(kUnary));
  cases.insert(cases.end(), std::begin(kFusedActivations), std::end(kFusedActivations));
  return cases;
}

TEST(Elementwise, UnaryF32) {
  for (const UnaryCase& u : f32_unary_cases()) {
    // Sizes: rank 0, a SIMD tail, several vectors plus a tail, threaded, 0-size.
    for (Shape s : {Shape{}, Shape{5}, Shape{3, 37}, Shape{4, 9000}, Shape{0, 4}}) {
      OpCase c{std::string(op_name(u.op)) + " " + shape_to_string(s),
               u.op,
               u.attrs,
               {f32(s, u.lo, u.hi)}};
      c.tolerance = u.tolerance;
      check_op(c);
    }
  }
}

TEST(Elementwise, UnaryOtherDTypes) {
  for (const UnaryCase& u : kUnary) {
    for (DType d : {DType::kF64, DType::kF16, DType::kBF16}) {
      OpCase c{std::string(op_name(u.op)) + " " + std::string(dtype_name(d)),
               u.op,
               u.attrs,
               {typed(d, {700}, u.lo, std::min(u.hi, 11.0))}};
      c.tolerance = std::max(u.tolerance, tolerance_of(d));
      check_op(c);
    }
  }
  for (OpKind op : {OpKind::kNeg, OpKind::kAbs, OpKind::kRelu})
    for (DType d : {DType::kI64, DType::kI32, DType::kI8})
      check_op({std::string(op_name(op)) + " int", op, {}, {operand(d, {3, 50}, -100, 100)}});
  check_op({"abs u8", OpKind::kAbs, {}, {operand(DType::kU8, {300}, 0, 255)}});
}

// Near 0 erf(x) ~ 1.128 x: the tolerance here is relative to the values.
TEST(Elementwise, ErfIsAccurateNearZero) {
  OpCase c{"erf small", OpKind::kErf, {}, {f32({1000}, -1e-3, 1e-3)}};
  c.tolerance = 3e-10;
  check_op(c);
  OpCase d{"erf around the switch", OpKind::kErf, {}, {f32({1000}, 0.9, 1.1)}};
  d.tolerance = 3e-7;
  check_op(d);
}

// NaN, infinities, signed zeros, subnormals and values past the fast formulas'
// ranges (Exp overflow, huge Sin/Cos arguments, Log of 0 and negatives).
TEST(Elementwise, UnarySpecialValues) {
  const double inf = INFINITY, nan = std::nan("");
  const std::vector<double> specials = {nan,  inf,   -inf, 0,    -0.0, 1e-40, -1e-40,
                                        1e30, -1e30, 100,  -100, 88.5, 89,    -87.5,
                                        -104, 5e4,   -4e4, 0.5,  -2,   1,     1e-20};
  for (const UnaryCase& u : f32_unary_cases()) {
    OpCase c{std::string(op_name(u.op)) + " specials",
             u.op,
             u.attrs,
             {values(DType::kF32, {int64_t(specials.size())}, specials)}};
    c.tolerance = std::max(u.tolerance, 1e-6);
    std::vector<Tensor> ref = run_reference(c);
    check_op(c);
    // The harness's error is relative to the largest value; here each element
    // must be close on its own, and non-finite results must match exactly.
    Graph g;
    g.opset = 18;
    Value* in = g.add_input("x", DType::kF32, sym_shape_from({int64_t(specials.size())}));
    Value* out = g.add_value("y");
    g.add_node(u.op, "n", {in}, {out}, u.attrs);
    g.mark_output(out);
    std::vector<float> xs(specials.begin(), specials.end());
    EagerExecutor exec(g, KernelSet::kCpu);
    auto cpu = exec.run({{"x", Tensor::from_vector<float>({int64_t(xs.size())}, xs).value()}});
    ASSERT_TRUE(cpu.ok()) << cpu.status().message();
    ASSERT_EQ(ref.size(), 1u);
    for (size_t i = 0; i < specials.size(); ++i) {
      double r = ref[0].element_as_double(int64_t(i)), v = (*cpu)[0].element_as_double(int64_t(i));
      SCOPED_TRACE(std::string(op_name(u.op)) + " of " + std::to_string(specials[i]));
      if (std::isnan(r)) {
        EXPECT_TRUE(std::isnan(v)) << v;
      } else if (std::isinf(r)) {
        EXPECT_EQ(r, v);
      } else {
        EXPECT_NEAR(v, r, 4e-7 * std::abs(r) + 1e-38);
      }
    }
  }
}

TEST(Elementwise, Clip) {
  for (DType d :
       {DType::kF32, DType::kF64, DType::kF16, DType::kI64, DType::kI32, DType::kI8, DType::kU8}) {
    const double tol = tolerance_of(d);
    OpCase both{
        "both", OpKind::kClip, {}, {operand(d, {4, 30}), values(d, {}, {1}), values(d, {}, {5})}};
    OpCase lo_only{"min only", OpKind::kClip, {}, {operand(d, {4, 30}), values(d, {}, {2})}};
    OpCase hi_only{
        "max only", OpKind::kClip, {}, {operand(d, {4, 30}), absent(), values(d, {1}, {2})}};
    OpCase none{"none", OpKind::kClip, {}, {operand(d, {4, 30})}};
    OpCase crossed{"min > max",
                   OpKind::kClip,
                   {},
                   {operand(d, {4, 30}), values(d, {}, {4}), values(d, {}, {2})}};
    OpCase big{
        "big", OpKind::kClip, {}, {operand(d, {100000}), values(d, {}, {1}), values(d, {}, {2})}};
    for (OpCase* c : {&both, &lo_only, &hi_only, &none, &crossed, &big}) {
      c->tolerance = tol;
      check_op(*c);
    }
  }
}

TEST(Elementwise, Where) {
  for (DType d : kAllDTypes) {
    const std::vector<std::tuple<Shape, Shape, Shape>> shapes = {
        {{3, 4}, {3, 4}, {3, 4}}, {{3, 4}, {}, {3, 4}},
        {{1, 4}, {3, 1}, {4}},    {{2, 1, 1}, {1, 5}, {}},
        {{0, 4}, {4}, {1}},       {{}, {}, {}},
        {{80000}, {80000}, {}},   {{64, 1, 2000}, {64, 1, 2000}, {1}}};
    for (const auto& [sc, sx, sy] : shapes)
      check_op({"where " + std::string(dtype_name(d)),
                OpKind::kWhere,
                {},
                {typed(DType::kBool, sc), operand(d, sx), operand(d, sy)}});
  }
}

TEST(Elementwise, Not) {
  check_op({"not", OpKind::kNot, {}, {typed(DType::kBool, {3, 5})}});
  check_op({"not scalar", OpKind::kNot, {}, {typed(DType::kBool, {})}});
  check_op({"not big", OpKind::kNot, {}, {typed(DType::kBool, {100000})}});
}

int64_t onnx_type(DType d) {
  switch (d) {
    case DType::kF32: return 1;
    case DType::kU8: return 2;
    case DType::kI8: return 3;
    case DType::kI32: return 6;
    case DType::kI64: return 7;
    case DType::kBool: return 9;
    case DType::kF16: return 10;
    case DType::kF64: return 11;
    case DType::kBF16: return 16;
  }
  return 0;
}

TEST(Elementwise, CastEveryPair) {
  const double inf = INFINITY, nan = std::nan("");
  for (DType from : kAllDTypes) {
    for (DType to : kAllDTypes) {
      std::string label = std::string(dtype_name(from)) + "->" + std::string(dtype_name(to));
      Attributes a = attrs({{"to", onnx_type(to)}});
      check_op({label, OpKind::kCast, a, {operand(from, {3, 41}, -300, 300)}});
      check_op({label + " scalar", OpKind::kCast, a, {operand(from, {})}});
      check_op({label + " big", OpKind::kCast, a, {operand(from, {70000}, -100, 100)}});
      if (dtype_is_float(from) && from != DType::kF16)  // out of range: saturates
        check_op({label + " specials",
                  OpKind::kCast,
                  a,
                  {values(from, {12},
                          {nan, inf, -inf, 1e20, -1e20, 3e9, -3e9, 70000, 255.9, -128.9, -0.9,
                           127.99})}});
    }
  }
}

TEST(Elementwise, IdentityAndDropout) {
  for (DType d : kAllDTypes) check_op({"identity", OpKind::kIdentity, {}, {operand(d, {3, 4})}});
  check_op({"identity scalar", OpKind::kIdentity, {}, {f32({})}});
  check_op({"dropout", OpKind::kDropout, {}, {f32({3, 4})}});
  OpCase mask{
      "dropout mask", OpKind::kDropout, {}, {f32({3, 4}), values(DType::kF32, {}, {0.3})}, 2};
  check_op(mask);
  OpCase inference{"dropout training off",
                   OpKind::kDropout,
                   {},
                   {typed(DType::kF64, {2, 5}), absent(), values(DType::kBool, {}, {0})},
                   2};
  check_op(inference);
}

// ---- the reference against hand-computed values ----

std::vector<double> ref_values(const OpCase& c) {
  std::vector<Tensor> out = run_reference(c);
  std::vector<double> v;
  if (!out.empty())
    for (int64_t i = 0; i < out[0].numel(); ++i) v.push_back(out[0].element_as_double(i));
  return v;
}

TEST(Elementwise, ReferenceValues) {
  using V = std::vector<double>;
  EXPECT_EQ(
      ref_values({"add",
                  OpKind::kAdd,
                  {},
                  {values(DType::kF32, {2, 1}, {1, 2}), values(DType::kF32, {3}, {10, 20, 30})}}),
      (V{11, 21, 31, 12, 22, 32}));
  EXPECT_EQ(
      ref_values(
          {"div i64", OpKind::kDiv, {}, {i64_vec({7, -7, 7, -7, 3}), i64_vec({2, 2, -2, -2, 0})}}),
      (V{3, -3, -3, 3, 0}));
  EXPECT_EQ(ref_values({"wrap i8",
                        OpKind::kAdd,
                        {},
                        {values(DType::kI8, {2}, {127, -128}), values(DType::kI8, {2}, {1, -1})}}),
            (V{-128, 127}));
  EXPECT_EQ(
      ref_values({"pow i64", OpKind::kPow, {}, {i64_vec({2, 3, -2, 2}), i64_vec({10, 3, 3, -1})}}),
      (V{1024, 27, -8, 0}));
  EXPECT_EQ(ref_values({"pow f32^i64",
                        OpKind::kPow,
                        {},
                        {values(DType::kF32, {2}, {1.5, 4}), i64_vec({2, -1})}}),
            (V{2.25, 0.25}));
  EXPECT_EQ(ref_values({"cast trunc",
                        OpKind::kCast,
                        attrs({{"to", int64_t(6)}}),
                        {values(DType::kF32, {5}, {2.7, -2.7, 1e10, -1e10, NAN})}}),
            (V{2, -2, 2147483647, -2147483648.0, 0}));
  EXPECT_EQ(ref_values({"cast u8",
                        OpKind::kCast,
                        attrs({{"to", int64_t(2)}}),
                        {values(DType::kI64, {3}, {255, 256, -1})}}),
            (V{255, 0, 255}));
  EXPECT_EQ(ref_values({"cast bool",
                        OpKind::kCast,
                        attrs({{"to", int64_t(9)}}),
                        {values(DType::kF32, {3}, {0, -0.5, NAN})}}),
            (V{0, 1, 1}));
  EXPECT_EQ(ref_values({"where",
                        OpKind::kWhere,
                        {},
                        {values(DType::kBool, {3}, {1, 0, 1}), values(DType::kF32, {}, {-1}),
                         values(DType::kF32, {3}, {4, 5, 6})}}),
            (V{-1, 5, -1}));
  EXPECT_EQ(ref_values({"clip crossed",
                        OpKind::kClip,
                        {},
                        {values(DType::kF32, {3}, {-5, 0, 5}), values(DType::kF32, {}, {2}),
                         values(DType::kF32, {}, {1})}}),
            (V{1, 1, 1}));
  EXPECT_EQ(ref_values({"max",
                        OpKind::kMax,
                        {},
                        {values(DType::kI32, {3}, {1, 5, 3}), values(DType::kI32, {1}, {2}),
                         values(DType::kI32, {3}, {0, 0, 9})}}),
            (V{2, 5, 9}));
  EXPECT_EQ(ref_values({"less", OpKind::kLess, {}, {i64_vec({1, 2, 3}), i64_vec({2})}}),
            (V{1, 0, 0}));
  EXPECT_EQ(ref_values({"relu", OpKind::kRelu, {}, {values(DType::kF32, {3}, {-1, 0, 2})}}),
            (V{0, 0, 2}));
  V erf = ref_values({"erf", OpKind::kErf, {}, {values(DType::kF32, {3}, {0, 0.5, -2})}});
  ASSERT_EQ(erf.size(), 3u);
  EXPECT_NEAR(erf[1], 0.5204998778, 1e-7);
  EXPECT_NEAR(erf[2], -0.9953222650, 1e-7);
  V sig = ref_values({"sigmoid", OpKind::kSigmoid, {}, {values(DType::kF32, {2}, {0, 2})}});
  ASSERT_EQ(sig.size(), 2u);
  EXPECT_EQ(sig[0], 0.5);
  EXPECT_NEAR(sig[1], 0.8807970780, 1e-7);
  V mask = [] {
    std::vector<Tensor> out = run_reference({"mask", OpKind::kDropout, {}, {f32({2})}, 2});
    return out.size() == 2 ? V{out[1].element_as_double(0), out[1].element_as_double(1)} : V{};
  }();
  EXPECT_EQ(mask, (V{1, 1}));
}

// ---- inference and invalid nodes ----

// Infers one node over inputs of the given dtypes and (symbolic) shapes.
Status infer(OpKind op, std::vector<std::pair<DType, std::optional<SymShape>>> inputs,
             Attributes a = {}, int outputs = 1, std::vector<Value*>* outs = nullptr,
             Graph* graph = nullptr) {
  Graph local;
  Graph& g = graph ? *graph : local;
  std::vector<Value*> ins, out_values;
  for (size_t i = 0; i < inputs.size(); ++i)
    ins.push_back(g.add_input("in" + std::to_string(i), inputs[i].first, inputs[i].second));
  for (int i = 0; i < outputs; ++i) out_values.push_back(g.add_value("out" + std::to_string(i)));
  g.add_node(op, "node", ins, out_values, std::move(a));
  for (Value* v : out_values) g.mark_output(v);
  if (outs) *outs = out_values;
  return graph_infer_shapes(g);
}

TEST(Elementwise, InferSymbolic) {
  Graph g;
  std::vector<Value*> outs;
  ASSERT_TRUE(infer(OpKind::kAdd,
                    {{DType::kF32, SymShape{Dim::named("batch"), Dim(1), Dim(8)}},
                     {DType::kF32, SymShape{Dim(5), Dim(8)}}},
                    {}, 1, &outs, &g)
                  .ok());
  EXPECT_EQ(sym_shape_to_string(*outs[0]->shape),
            sym_shape_to_string({Dim::named("batch"), Dim(5), Dim(8)}));

  Graph g2;
  ASSERT_TRUE(infer(OpKind::kWhere,
                    {{DType::kBool, std::nullopt},
                     {DType::kF32, SymShape{Dim(3)}},
                     {DType::kF32, SymShape{}}},
                    {}, 1, &outs, &g2)
                  .ok());
  EXPECT_FALSE(outs[0]->shape.has_value());  // unknown rank stays unknown

  Graph g3;
  ASSERT_TRUE(infer(OpKind::kCast, {{DType::kF32, SymShape{Dim()}}}, attrs({{"to", int64_t(7)}}), 1,
                    &outs, &g3)
                  .ok());
  EXPECT_EQ(outs[0]->dtype, DType::kI64);

  Graph g4;
  ASSERT_TRUE(infer(OpKind::kLess, {{DType::kI64, SymShape{Dim(2)}}, {DType::kI64, SymShape{}}}, {},
                    1, &outs, &g4)
                  .ok());
  EXPECT_EQ(outs[0]->dtype, DType::kBool);

  Graph g5;
  ASSERT_TRUE(infer(OpKind::kDropout, {{DType::kF16, SymShape{Dim(2)}}}, {}, 2, &outs, &g5).ok());
  EXPECT_EQ(outs[1]->dtype, DType::kBool);
}

TEST(Elementwise, InvalidNodes) {
  const SymShape s23{Dim(2), Dim(3)};
  auto code = [](const Status& s) { return s.code(); };
  EXPECT_EQ(code(infer(OpKind::kAdd, {{DType::kF32, s23}, {DType::kI64, s23}})),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(code(infer(OpKind::kMul, {{DType::kF32, s23}, {DType::kF32, SymShape{Dim(4)}}})),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(code(infer(OpKind::kAdd, {{DType::kF32, s23}})), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(infer(OpKind::kSub, {{DType::kF32, s23}, {DType::kF32, s23}, {DType::kF32, s23}})),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(code(infer(OpKind::kMax, {})), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(infer(OpKind::kAdd, {{DType::kBool, s23}, {DType::kBool, s23}})),
            StatusCode::kUnsupported);
  EXPECT_EQ(
      code(infer(OpKind::kWhere, {{DType::kF32, s23}, {DType::kF32, s23}, {DType::kF32, s23}})),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(
      code(infer(OpKind::kWhere, {{DType::kBool, s23}, {DType::kF32, s23}, {DType::kI32, s23}})),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(code(infer(OpKind::kSqrt, {{DType::kI64, s23}})), StatusCode::kUnsupported);
  EXPECT_EQ(code(infer(OpKind::kNot, {{DType::kF32, s23}})), StatusCode::kUnsupported);
  EXPECT_EQ(code(infer(OpKind::kCast, {{DType::kF32, s23}})), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(infer(OpKind::kCast, {{DType::kF32, s23}}, attrs({{"to", int64_t(8)}}))),
            StatusCode::kUnsupported);
  EXPECT_EQ(code(infer(OpKind::kCast, {{DType::kF32, s23}}, attrs({{"to", int64_t(999)}}))),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(code(infer(OpKind::kClip, {{DType::kF32, s23}, {DType::kF32, SymShape{Dim(2)}}})),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(code(infer(OpKind::kClip, {{DType::kF32, s23}, {DType::kI64, SymShape{}}})),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(code(infer(OpKind::kRelu, {{DType::kF32, s23}}, {}, 2)), StatusCode::kInvalidArgument);

  // training_mode = true is known only when its value is.
  Graph g;
  g.opset = 18;
  Value* x = g.add_input("x", DType::kF32, SymShape{Dim(3)});
  Value* mode = g.add_input("mode", DType::kBool, SymShape{});
  Value* y = g.add_value("y");
  g.add_node(OpKind::kDropout, "drop", {x, nullptr, mode}, {y});
  g.mark_output(y);
  ASSERT_TRUE(graph_infer_shapes(g).ok());
  EagerExecutor exec(g);
  auto out = exec.run({{"x", Tensor::from_vector<float>({3}, {1, 2, 3}).value()},
                       {"mode", Tensor::from_vector<bool>({}, {true}).value()}});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kUnsupported);
}

}  // namespace
}  // namespace kiln::testing
