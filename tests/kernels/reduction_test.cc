// Softmax, LayerNormalization, InstanceNormalization, ReduceMean/Sum/Max,
// ArgMax, CumSum: CPU kernels against the reference, the reference against
// hand-computed values, and invalid nodes.
#include <hwy/targets.h>

#include <cmath>
#include <limits>

#include "ir/shape_inference.h"
#include "op_test_util.h"

namespace kiln::testing {
namespace {

using Ints = std::vector<int64_t>;

InputSpec values(DType d, Shape s, std::vector<double> v) { return {d, std::move(s), std::move(v)}; }
InputSpec scalar_axis(DType d, int64_t axis) { return {d, {}, std::vector<double>{double(axis)}}; }

std::vector<double> as_doubles(const Tensor& t) {
  std::vector<double> out;
  for (int64_t i = 0; i < t.numel(); ++i) out.push_back(t.element_as_double(i));
  return out;
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << "element " << i;
    } else if (got[i] != want[i]) {  // also lets equal infinities through
      EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
    }
  }
}

// Shape inference on one node whose inputs are graph inputs (values unknown).
Status infer_node_shapes(OpKind op, Attributes a, std::vector<std::pair<DType, SymShape>> inputs,
                         int outputs = 1) {
  Graph g;
  std::vector<Value*> ins, outs;
  for (size_t i = 0; i < inputs.size(); ++i)
    ins.push_back(g.add_input("in" + std::to_string(i), inputs[i].first, inputs[i].second));
  for (int i = 0; i < outputs; ++i) outs.push_back(g.add_value("out" + std::to_string(i)));
  g.add_node(op, "node", ins, outs, std::move(a));
  return graph_infer_shapes(g);
}

TEST(Reduction, Softmax) {
  for (OpCase c : std::vector<OpCase>{
           {"last axis", OpKind::kSoftmax, {}, {f32({4, 33})}},
           {"rank 3 default", OpKind::kSoftmax, {}, {f32({2, 3, 100})}},
           {"axis 0", OpKind::kSoftmax, attrs({{"axis", int64_t(0)}}), {f32({5, 7})}},
           {"middle axis", OpKind::kSoftmax, attrs({{"axis", int64_t(1)}}), {f32({2, 9, 5})}},
           {"axis -2", OpKind::kSoftmax, attrs({{"axis", int64_t(-2)}}), {f32({3, 4, 6})}},
           {"large values", OpKind::kSoftmax, {}, {f32({3, 20}, -1000, 1000)}},
           {"rank 1", OpKind::kSoftmax, {}, {f32({1})}},
           {"zero rows", OpKind::kSoftmax, {}, {f32({0, 5})}},
           {"zero columns", OpKind::kSoftmax, {}, {f32({3, 0})}},
           {"attention-sized, threaded", OpKind::kSoftmax, {}, {f32({2, 8, 77, 77}, -8, 8)}},
           {"long rows", OpKind::kSoftmax, {}, {f32({3, 9000}, -20, 20)}},
       }) {
    c.tolerance = 1e-6;  // relative to max |softmax| <= 1
    check_op(c);
  }
}

// Scores down to 86 below their row's max: each probability, however small,
// as close to the f64 reference's as f32 allows (check_op's tolerance is
// relative to the largest, 1). f32's score - max is rounded, by up to
// |score - max| 2^-24, which exp turns into that relative error; the exp,
// the sum and the divide add a few ulps.
TEST(Reduction, SoftmaxSmallProbabilitiesAreAccurate) {
  std::vector<double> scores;
  for (int i = 0; i < 200; ++i) scores.push_back(double(float(3.0 - 0.4321 * i)));
  const OpCase c{"spread", OpKind::kSoftmax, {}, {values(DType::kF32, {2, 100}, scores)}};
  const std::vector<Tensor> want = run_reference(c), got = run_cpu(c);
  ASSERT_EQ(got.size(), 1u);
  for (int64_t k = 0; k < want[0].numel(); ++k) {
    const double w = want[0].element_as_double(k), below_max = scores[size_t(k / 100 * 100)] - scores[size_t(k)];
    ASSERT_GT(w, 0.0) << k;
    EXPECT_NEAR(got[0].element_as_double(k) / w, 1.0, below_max * 0x1p-24 + 5e-7)
        << "probability " << k << " of " << w << ", " << below_max << " below the max";
  }
}

TEST(Reduction, SoftmaxReferenceValues) {
  const float kMin = std::numeric_limits<float>::lowest();
  const double inf = INFINITY;
  OpCase c{"rows", OpKind::kSoftmax, {},
           {values(DType::kF32, {4, 3}, {1, 2, 3, 0, kMin, kMin, -inf, -inf, -inf, 1, inf, 2})}};
  std::vector<double> want = {0.0900305732, 0.2447284711, 0.6652409558, 1, 0, 0};
  for (int i = 0; i < 6; ++i) want.push_back(NAN);  // all -inf, and +inf, rows: NaN as in numpy
  expect_near(as_doubles(run_reference(c)[0]), want, 1e-7);
  check_op(c);  // the CPU kernel gives the same NaNs
}

TEST(Reduction, LayerNormalization) {
  const double eps = 1e-5;  // per-element error relative to O(1) normalized values
  for (OpCase c : std::vector<OpCase>{
           {"last axis", OpKind::kLayerNormalization, {}, {f32({2, 3, 8}), f32({8}), f32({8})}},
           {"clip-sized", OpKind::kLayerNormalization, {}, {f32({77, 768}), f32({768}), f32({768})}, 3},
           {"axis 1, three outputs", OpKind::kLayerNormalization, attrs({{"axis", int64_t(1)}}),
            {f32({2, 3, 8}), f32({3, 8}), f32({3, 8})}, 3},
           {"axis 0", OpKind::kLayerNormalization, attrs({{"axis", int64_t(0)}, {"epsilon", 1e-2f}}),
            {f32({4, 5}), f32({4, 5}), f32({4, 5})}, 3},
           {"no bias", OpKind::kLayerNormalization, {}, {f32({5, 17}), f32({17})}},
           {"broadcast scale", OpKind::kLayerNormalization, attrs({{"axis", int64_t(-2)}}),
            {f32({2, 3, 8}), f32({8}), f32({1, 8})}, 2},
           {"zero rows", OpKind::kLayerNormalization, {}, {f32({0, 8}), f32({8}), f32({8})}, 3},
           {"threaded", OpKind::kLayerNormalization, {}, {f32({256, 320}, -3, 5), f32({320}), f32({320})}},
       }) {
    c.tolerance = eps;
    check_op(c);
  }
}

TEST(Reduction, LayerNormalizationReferenceValues) {
  // Row [1, 2, 3]: mean 2, variance 2/3.
  OpCase c{"row", OpKind::kLayerNormalization, attrs({{"epsilon", 0.0f}}),
           {values(DType::kF32, {1, 3}, {1, 2, 3}), values(DType::kF32, {3}, {1, 1, 2}),
            values(DType::kF32, {3}, {0, 0, 1})}, 3};
  std::vector<Tensor> out = run_reference(c);
  const double inv = 1 / std::sqrt(2.0 / 3);
  expect_near(as_doubles(out[0]), {-inv, 0, 2 * inv + 1}, 1e-6);
  expect_near(as_doubles(out[1]), {2}, 1e-7);
  expect_near(as_doubles(out[2]), {inv}, 1e-6);
  EXPECT_EQ(out[1].shape(), (Shape{1, 1}));
}

TEST(Reduction, InstanceNormalization) {
  for (OpCase c : std::vector<OpCase>{
           {"nchw", OpKind::kInstanceNormalization, {}, {f32({2, 3, 4, 5}), f32({3}), f32({3})}},
           {"epsilon", OpKind::kInstanceNormalization, attrs({{"epsilon", 1e-2f}}),
            {f32({1, 4, 7}), f32({4}), f32({4})}},
           {"groupnorm-shaped, threaded", OpKind::kInstanceNormalization, {},
            {f32({2, 32, 2560}, -4, 6), f32({32}), f32({32})}},
           {"long rows", OpKind::kInstanceNormalization, {}, {f32({1, 2, 20000}, 0, 100), f32({2}), f32({2})}},
           {"rank 2", OpKind::kInstanceNormalization, {}, {f32({3, 4}), f32({4}), f32({4})}},
           {"zero batch", OpKind::kInstanceNormalization, {}, {f32({0, 3, 4}), f32({3}), f32({3})}},
       }) {
    c.tolerance = 2e-5;
    check_op(c);
  }
}

TEST(Reduction, InstanceNormalizationReferenceValues) {
  // Channel 0 is [0, 2]: mean 1, variance 1; channel 1 is constant.
  OpCase c{"two channels", OpKind::kInstanceNormalization, attrs({{"epsilon", 1e-12f}}),
           {values(DType::kF32, {1, 2, 2}, {0, 2, 5, 5}), values(DType::kF32, {2}, {2, 1}),
            values(DType::kF32, {2}, {1, 0})}};
  expect_near(as_doubles(run_reference(c)[0]), {-1, 3, 0, 0}, 1e-5);
}

TEST(Reduction, ReduceOps) {
  for (OpKind op : {OpKind::kReduceSum, OpKind::kReduceMean, OpKind::kReduceMax}) {
    // Before opset 13 (Sum) / 18 (Mean, Max) axes were an attribute; both forms are accepted.
    auto axes = [&](Ints a) {
      return InputSpec{DType::kI64, {int64_t(a.size())}, std::vector<double>(a.begin(), a.end())};
    };
    for (OpCase c : std::vector<OpCase>{
             {"last axis", op, attrs({{"axes", Ints{-1}}}), {f32({6, 33})}},
             {"last axis input", op, {}, {f32({6, 33}), axes({1})}},
             {"last axes, keepdims 0", op, attrs({{"axes", Ints{1, 2}}, {"keepdims", int64_t(0)}}),
              {f32({4, 5, 6})}},
             {"middle axis", op, attrs({{"axes", Ints{1}}}), {f32({3, 7, 10})}},
             {"leading axis", op, attrs({{"axes", Ints{0}}}), {f32({7, 1029})}},
             {"outer and inner", op, attrs({{"axes", Ints{0, 2}}}), {f32({3, 4, 5})}},
             {"alternating", op, attrs({{"axes", Ints{0, 2, 4}}, {"keepdims", int64_t(0)}}),
              {f32({2, 3, 4, 5, 6})}},
             {"size-1 dims merge", op, attrs({{"axes", Ints{1, 3}}}), {f32({4, 5, 1, 6})}},
             {"default: all", op, {}, {f32({3, 4, 5})}},
             {"all, keepdims 0", op, attrs({{"keepdims", int64_t(0)}}), {f32({3, 4})}},
             {"noop with empty axes", op, attrs({{"noop_with_empty_axes", int64_t(1)}}),
              {f32({3, 4}), axes({})}},
             {"empty axes: all", op, {}, {f32({3, 4}), axes({})}},
             {"rank 0", op, {}, {f32({})}},
             {"zero kept", op, attrs({{"axes", Ints{1}}}), {f32({0, 4})}},
             {"zero reduced", op, attrs({{"axes", Ints{1}}}), {f32({3, 0})}},
             {"zero reduced, columns", op, attrs({{"axes", Ints{0}}}), {f32({0, 3})}},
             {"big rows, threaded", op, attrs({{"axes", Ints{-1}}}), {f32({64, 1280})}},
             {"big columns, threaded", op, attrs({{"axes", Ints{1}}}), {f32({2, 50, 4000})}},
             {"f64", op, attrs({{"axes", Ints{0, 2}}}), {typed(DType::kF64, {3, 4, 5})}},
             {"i64", op, attrs({{"axes", Ints{1}}}), {typed(DType::kI64, {3, 4, 5}, -100, 100)}},
             {"i32", op, attrs({{"axes", Ints{0}}, {"keepdims", int64_t(0)}}),
              {typed(DType::kI32, {4, 5}, -100, 100)}},
             {"i64 all", op, {}, {typed(DType::kI64, {7}, -9, 9)}},
         }) {
      c.label = std::string(op_name(op)) + " " + c.label;
      c.tolerance = 1e-5;
      check_op(c);
    }
  }
  check_op({"ReduceMax i8", OpKind::kReduceMax, {}, {typed(DType::kI8, {4, 5}, -100, 100)}});
  check_op({"ReduceMax u8", OpKind::kReduceMax, attrs({{"axes", Ints{0}}}), {typed(DType::kU8, {4, 5}, 0, 200)}});
}

TEST(Reduction, ReduceReferenceValues) {
  const InputSpec x = values(DType::kF32, {2, 3}, {1, 2, 3, 4, 5, 9});
  expect_near(as_doubles(run_reference({"sum", OpKind::kReduceSum, attrs({{"axes", Ints{0}}}), {x}})[0]),
              {5, 7, 12}, 0);
  expect_near(as_doubles(run_reference({"mean", OpKind::kReduceMean, attrs({{"axes", Ints{1}}}), {x}})[0]),
              {2, 6}, 1e-7);
  expect_near(as_doubles(run_reference({"max", OpKind::kReduceMax, {}, {x}})[0]), {9}, 0);
  // An empty reduction: sum 0, mean NaN, max -inf.
  const InputSpec empty = f32({2, 0});
  Attributes a = attrs({{"axes", Ints{1}}});
  expect_near(as_doubles(run_reference({"empty sum", OpKind::kReduceSum, a, {empty}})[0]), {0, 0}, 0);
  expect_near(as_doubles(run_reference({"empty mean", OpKind::kReduceMean, a, {empty}})[0]), {NAN, NAN}, 0);
  expect_near(as_doubles(run_reference({"empty max", OpKind::kReduceMax, a, {empty}})[0]),
              {-INFINITY, -INFINITY}, 0);
  // Integer mean truncates toward zero, like numpy's mean cast back to int.
  expect_near(as_doubles(run_reference({"int mean", OpKind::kReduceMean, {},
                                        {values(DType::kI64, {2}, {-3, -4})}})[0]),
              {-3}, 0);
  // NaN wins a max.
  OpCase nan_max{"nan max", OpKind::kReduceMax, attrs({{"axes", Ints{1}}}),
                 {values(DType::kF32, {2, 3}, {1, NAN, 3, 4, 5, 6})}};
  expect_near(as_doubles(run_reference(nan_max)[0]), {NAN, 6}, 0);
  check_op(nan_max);
  std::vector<Tensor> noop = run_reference(
      {"noop", OpKind::kReduceSum, attrs({{"noop_with_empty_axes", int64_t(1)}}), {x}});
  EXPECT_EQ(noop[0].shape(), (Shape{2, 3}));
}

TEST(Reduction, ArgMax) {
  const InputSpec ties = values(DType::kF32, {3, 4}, {1, 5, 5, 0, 2, 2, 2, 2, 7, 1, 7, 3});
  for (const OpCase& c : std::vector<OpCase>{
           {"default axis 0", OpKind::kArgMax, {}, {f32({4, 5})}},
           {"last axis, keepdims 0", OpKind::kArgMax,
            attrs({{"axis", int64_t(-1)}, {"keepdims", int64_t(0)}}), {f32({3, 4, 5})}},
           {"middle axis", OpKind::kArgMax, attrs({{"axis", int64_t(1)}}), {f32({3, 4, 5})}},
           {"ties first", OpKind::kArgMax, attrs({{"axis", int64_t(1)}}), {ties}},
           {"ties last", OpKind::kArgMax, attrs({{"axis", int64_t(1)}, {"select_last_index", int64_t(1)}}),
            {ties}},
           {"i64 token ids", OpKind::kArgMax, attrs({{"axis", int64_t(-1)}}),
            {typed(DType::kI64, {2, 77}, 0, 49408)}},
           {"i32", OpKind::kArgMax, {}, {typed(DType::kI32, {6, 2}, -5, 5)}},
           {"rank 1", OpKind::kArgMax, attrs({{"keepdims", int64_t(0)}}), {f32({9})}},
           {"zero outer", OpKind::kArgMax, attrs({{"axis", int64_t(1)}}), {f32({0, 3})}},
       })
    check_op(c);
  expect_near(as_doubles(run_reference({"first", OpKind::kArgMax, attrs({{"axis", int64_t(1)}}), {ties}})[0]),
              {1, 0, 0}, 0);
  expect_near(as_doubles(run_reference({"last", OpKind::kArgMax,
                                        attrs({{"axis", int64_t(1)}, {"select_last_index", int64_t(1)}}),
                                        {ties}})[0]),
              {2, 3, 2}, 0);
}

TEST(Reduction, CumSum) {
  for (OpCase c : std::vector<OpCase>{
           {"1-D", OpKind::kCumSum, {}, {f32({10}), scalar_axis(DType::kI64, 0)}},
           {"axis 0", OpKind::kCumSum, {}, {f32({4, 5}), scalar_axis(DType::kI32, 0)}},
           {"axis 1", OpKind::kCumSum, {}, {f32({4, 5}), scalar_axis(DType::kI32, 1)}},
           {"axis -1, exclusive", OpKind::kCumSum, attrs({{"exclusive", int64_t(1)}}),
            {f32({3, 4, 5}), scalar_axis(DType::kI64, -1)}},
           {"middle, reverse", OpKind::kCumSum, attrs({{"reverse", int64_t(1)}}),
            {f32({3, 4, 5}), scalar_axis(DType::kI64, 1)}},
           {"reverse exclusive", OpKind::kCumSum, attrs({{"reverse", int64_t(1)}, {"exclusive", int64_t(1)}}),
            {f32({3, 6}), scalar_axis(DType::kI64, 1)}},
           {"1-element axis tensor", OpKind::kCumSum, {}, {f32({3, 6}), values(DType::kI64, {1}, {0})}},
           {"f64", OpKind::kCumSum, {}, {typed(DType::kF64, {5, 3}), scalar_axis(DType::kI32, 0)}},
           {"i64", OpKind::kCumSum, attrs({{"reverse", int64_t(1)}}),
            {typed(DType::kI64, {5, 3}, -50, 50), scalar_axis(DType::kI64, 1)}},
           {"i32", OpKind::kCumSum, attrs({{"exclusive", int64_t(1)}}),
            {typed(DType::kI32, {5, 3}, -50, 50), scalar_axis(DType::kI64, 0)}},
           {"zero-size", OpKind::kCumSum, {}, {f32({0, 3}), scalar_axis(DType::kI64, 1)}},
           {"threaded", OpKind::kCumSum, {}, {f32({64, 700}), scalar_axis(DType::kI64, 1)}},
       }) {
    c.tolerance = 1e-5;
    check_op(c);
  }
  const InputSpec x = values(DType::kF32, {5}, {1, 2, 3, 4, 5});
  auto cumsum = [&](int64_t exclusive, int64_t reverse) {
    return as_doubles(run_reference({"values", OpKind::kCumSum,
                                     attrs({{"exclusive", exclusive}, {"reverse", reverse}}),
                                     {x, scalar_axis(DType::kI32, 0)}})[0]);
  };
  expect_near(cumsum(0, 0), {1, 3, 6, 10, 15}, 0);
  expect_near(cumsum(1, 0), {0, 1, 3, 6, 10}, 0);
  expect_near(cumsum(0, 1), {15, 14, 12, 9, 5}, 0);
  expect_near(cumsum(1, 1), {14, 12, 9, 5, 0}, 0);
}

// The f32 paths are compiled per SIMD target; CI machines may pick another
// one than this machine does, so check each (tails, lane reductions).
TEST(Reduction, EveryHighwayTarget) {
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    SCOPED_TRACE(hwy::TargetName(target));
    hwy::SetSupportedTargetsForTest(target);
    for (OpCase c : std::vector<OpCase>{
             {"softmax", OpKind::kSoftmax, {}, {f32({3, 37}, -9, 9)}},
             {"layernorm", OpKind::kLayerNormalization, {}, {f32({3, 37}), f32({37}), f32({37})}, 3},
             {"instancenorm", OpKind::kInstanceNormalization, {}, {f32({2, 3, 5000}), f32({3}), f32({3})}},
             // One element a row: variance 0, inv_std 1/sqrt(eps), x - mean exactly 0.
             {"instancenorm, constant rows", OpKind::kInstanceNormalization, {}, {f32({3, 4}), f32({4}), f32({4})}},
             {"sum rows", OpKind::kReduceSum, attrs({{"axes", Ints{1}}}), {f32({3, 4101})}},
             {"mean columns", OpKind::kReduceMean, attrs({{"axes", Ints{1}}}), {f32({2, 5, 1031})}},
             {"max rows", OpKind::kReduceMax, attrs({{"axes", Ints{1}}}), {f32({3, 13})}},
             {"max columns", OpKind::kReduceMax, attrs({{"axes", Ints{0}}}), {f32({5, 19})}},
         }) {
      c.tolerance = 2e-5;
      check_op(c);
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

TEST(Reduction, InferShapes) {
  // Symbolic dims survive; reduced ones become 1 or vanish.
  Graph g;
  Value* x = g.add_input("x", DType::kF32, SymShape{Dim::named("b"), Dim(77), Dim(768)});
  Value* mean = g.add_value("mean");
  g.add_node(OpKind::kReduceMean, "mean", {x}, {mean}, attrs({{"axes", Ints{-1}}}));
  Value* sum = g.add_value("sum");
  g.add_node(OpKind::kReduceSum, "sum", {x, g.add_constant("axes", Tensor::from_vector<int64_t>({1}, {1}).value())},
             {sum}, attrs({{"keepdims", int64_t(0)}}));
  Value* arg = g.add_value("arg");
  g.add_node(OpKind::kArgMax, "arg", {x}, {arg}, attrs({{"axis", int64_t(1)}, {"keepdims", int64_t(0)}}));
  Value* ln_y = g.add_value("ln_y");
  Value* ln_mean = g.add_value("ln_mean");
  g.add_node(OpKind::kLayerNormalization, "ln", {x, g.add_input("w", DType::kF32, SymShape{Dim(768)})},
             {ln_y, ln_mean});
  Value* unknown_axes = g.add_value("unknown_axes");
  g.add_node(OpKind::kReduceSum, "dyn", {x, g.add_input("ax", DType::kI64, SymShape{Dim(1)})},
             {unknown_axes});
  ASSERT_TRUE(graph_infer_shapes(g).ok());
  EXPECT_EQ(sym_shape_to_string(*mean->shape), sym_shape_to_string({Dim::named("b"), Dim(77), Dim(1)}));
  EXPECT_EQ(sym_shape_to_string(*sum->shape), sym_shape_to_string({Dim::named("b"), Dim(768)}));
  EXPECT_EQ(arg->dtype, DType::kI64);
  EXPECT_EQ(sym_shape_to_string(*arg->shape), sym_shape_to_string({Dim::named("b"), Dim(768)}));
  EXPECT_EQ(sym_shape_to_string(*ln_mean->shape), sym_shape_to_string({Dim::named("b"), Dim(77), Dim(1)}));
  EXPECT_EQ(ln_mean->dtype, DType::kF32);
  EXPECT_EQ(unknown_axes->shape->size(), 3u);  // keepdims: rank known, dims not
}

TEST(Reduction, InvalidNodesAreErrors) {
  const SymShape s{Dim(2), Dim(3)};
  auto fails = [](const Status& st) { return !st.ok() && st.code() != StatusCode::kInternal; };
  EXPECT_TRUE(fails(infer_node_shapes(OpKind::kSoftmax, attrs({{"axis", int64_t(2)}}), {{DType::kF32, s}})));
  EXPECT_TRUE(fails(infer_node_shapes(OpKind::kReduceSum, attrs({{"axes", Ints{1, -1}}}), {{DType::kF32, s}})));
  EXPECT_TRUE(fails(infer_node_shapes(OpKind::kReduceMean, attrs({{"axes", Ints{-3}}}), {{DType::kF32, s}})));
  EXPECT_TRUE(fails(infer_node_shapes(OpKind::kReduceMax, attrs({{"axes", Ints{0}}}),
                                      {{DType::kF32, s}, {DType::kI64, SymShape{Dim(1)}}})));
  EXPECT_TRUE(fails(infer_node_shapes(OpKind::kArgMax, attrs({{"axis", int64_t(1)}}),
                                      {{DType::kF32, SymShape{Dim(2), Dim(0)}}})));
  EXPECT_TRUE(fails(infer_node_shapes(OpKind::kLayerNormalization, {}, {{DType::kF32, s}})));
  EXPECT_TRUE(fails(infer_node_shapes(OpKind::kLayerNormalization, {},
                                      {{DType::kF32, s}, {DType::kF32, SymShape{Dim(4)}}})));
  EXPECT_TRUE(fails(infer_node_shapes(OpKind::kInstanceNormalization, {},
                                      {{DType::kF32, SymShape{Dim(1), Dim(3), Dim(4)}},
                                       {DType::kF32, SymShape{Dim(2)}}, {DType::kF32, SymShape{Dim(2)}}})));
  EXPECT_TRUE(fails(infer_node_shapes(OpKind::kCumSum, {}, {{DType::kF32, s}, {DType::kI64, SymShape{Dim(2)}}})));
  EXPECT_TRUE(fails(infer_node_shapes(OpKind::kCumSum, {}, {{DType::kF32, s}})));
  // A valid node whose dtype kiln does not implement is Unsupported, not an error.
  EXPECT_EQ(infer_node_shapes(OpKind::kSoftmax, {}, {{DType::kF16, s}}).code(), StatusCode::kUnsupported);
}

}  // namespace
}  // namespace kiln::testing
