// kiln.Gelu, kiln.Silu, kiln.GroupNorm: CPU kernels against the reference,
// the reference against hand-computed values.
#include <cmath>

#include "ir/shape_inference.h"
#include "op_test_util.h"

namespace kiln::testing {
namespace {

std::vector<double> reference_values(const OpCase& c) {
  std::vector<double> out;
  const Tensor t = run_reference(c)[0];
  for (int64_t i = 0; i < t.numel(); ++i) out.push_back(t.element_as_double(i));
  return out;
}

InputSpec exact(Shape s, std::vector<double> v) { return {DType::kF32, std::move(s), std::move(v)}; }

TEST(Fused, Gelu) {
  for (const char* form : {"none", "tanh", "sigmoid"}) {
    check_op({std::string("small ") + form, OpKind::kGelu, attrs({{"approximate", std::string(form)}}),
              {f32({3, 7}, -6, 6)}});
    check_op({std::string("threaded ") + form, OpKind::kGelu, attrs({{"approximate", std::string(form)}}),
              {f32({4, 64, 257}, -10, 10)}});
  }
}

TEST(Fused, GeluReferenceValues) {
  // GELU(1) = Phi(1) = 0.8413447; tanh form 0.8411920; quick GELU 1/(1+e^-1.702).
  auto gelu = [](const char* form) {
    return reference_values({"one", OpKind::kGelu, attrs({{"approximate", std::string(form)}}), {exact({2}, {1, 0})}});
  };
  EXPECT_NEAR(gelu("none")[0], 0.8413447, 1e-6);
  EXPECT_NEAR(gelu("tanh")[0], 0.8411920, 1e-6);
  EXPECT_NEAR(gelu("sigmoid")[0], 1 / (1 + std::exp(-1.702)), 1e-6);
  EXPECT_EQ(gelu("none")[1], 0.0);
}

TEST(Fused, Geglu) {
  for (const char* form : {"none", "tanh"}) {
    check_op({std::string("small ") + form, OpKind::kGeglu, attrs({{"approximate", std::string(form)}}), {f32({3, 5, 14}, -4, 4)}});
    check_op({std::string("threaded ") + form, OpKind::kGeglu, attrs({{"approximate", std::string(form)}}),
              {f32({2, 512, 320}, -4, 4)}});
  }
  // [a0, a1, g0, g1] -> [a0 gelu(g0), a1 gelu(g1)]
  const std::vector<double> got = reference_values({"two", OpKind::kGeglu, {}, {exact({1, 4}, {2, 3, 1, 0})}});
  EXPECT_NEAR(got[0], 2 * 0.8413447, 1e-6);
  EXPECT_EQ(got[1], 0.0);
}

TEST(Fused, Silu) {
  check_op({"silu", OpKind::kSilu, {}, {f32({5, 9}, -20, 20)}});
  check_op({"alpha", OpKind::kSilu, attrs({{"alpha", 1.702f}}), {f32({2, 3, 1000}, -8, 8)}});
  const std::vector<double> got = reference_values({"two", OpKind::kSilu, {}, {exact({2}, {2, -1})}});
  EXPECT_NEAR(got[0], 2 / (1 + std::exp(-2.0)), 1e-6);
  EXPECT_NEAR(got[1], -1 / (1 + std::exp(1.0)), 1e-6);
}

TEST(Fused, GroupNorm) {
  for (OpCase c : std::vector<OpCase>{
           {"sd resnet block", OpKind::kGroupNorm, attrs({{"num_groups", int64_t(8)}}),
            {f32({2, 32, 6, 5}), f32({32}), f32({32})}},
           {"silu", OpKind::kGroupNorm, attrs({{"num_groups", int64_t(4)}, {"activation", std::string("silu")}}),
            {f32({1, 16, 9, 9}, -3, 5), f32({16}), f32({16})}},
           {"one group per channel", OpKind::kGroupNorm, attrs({{"num_groups", int64_t(6)}, {"epsilon", 1e-6f}}),
            {f32({3, 6, 11}), f32({6}), f32({6})}},
           {"threaded, long rows", OpKind::kGroupNorm,
            attrs({{"num_groups", int64_t(32)}, {"activation", std::string("silu")}}),
            {f32({1, 64, 32, 32}, -2, 6), f32({64}), f32({64})}},
           {"zero batch", OpKind::kGroupNorm, attrs({{"num_groups", int64_t(2)}}), {f32({0, 4, 3}), f32({4}), f32({4})}},
       }) {
    c.tolerance = 2e-5;
    check_op(c);
  }
}

TEST(Fused, GroupNormReferenceValues) {
  // One group over channels [0, 2] and [4, 6]: mean 3, variance 5.
  const double inv = 1 / std::sqrt(5.0);
  const std::vector<double> got = reference_values(
      {"two channels", OpKind::kGroupNorm, attrs({{"num_groups", int64_t(1)}, {"epsilon", 0.0f}}),
       {exact({1, 2, 2}, {0, 2, 4, 6}), exact({2}, {1, 2}), exact({2}, {0, 1})}});
  const std::vector<double> want = {-3 * inv, -1 * inv, 2 * inv + 1, 6 * inv + 1};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << i;
}

TEST(Fused, GroupNormRejectsBadGroups) {
  Graph g;
  Value* x = g.add_input("x", DType::kF32, SymShape{Dim(1), Dim(32), Dim(4)});
  Value* scale = g.add_input("scale", DType::kF32, SymShape{Dim(32)});
  Value* y = g.add_value("y");
  g.add_node(OpKind::kGroupNorm, "gn", {x, scale, scale}, {y}, attrs({{"num_groups", int64_t(7)}}));
  g.mark_output(y);
  Status st = graph_infer_shapes(g);
  EXPECT_NE(st.message().find("32 channels do not split into 7 groups"), std::string::npos) << st.message();
}

TEST(Fused, ModulatedLayerNorm) {
  check_op({"per sample", OpKind::kModulatedLayerNorm, attrs({{"epsilon", 1e-6f}}),
            {f32({2, 9, 40}), f32({2, 1, 40}), f32({2, 1, 40})}});
  check_op({"shared", OpKind::kModulatedLayerNorm, {}, {f32({3, 4, 8}), f32({8}), f32({3, 1, 8})}});
  check_op({"threaded", OpKind::kModulatedLayerNorm, {}, {f32({2, 256, 384}), f32({2, 1, 384}), f32({2, 1, 384})}});
}

TEST(Fused, RmsNorm) {
  check_op({"rows", OpKind::kRmsNorm, attrs({{"epsilon", 1e-6f}}), {f32({2, 7, 40}), f32({40})}});
  check_op({"rows threaded", OpKind::kRmsNorm, {}, {f32({4, 300, 96}), f32({96})}});
  // The Wan VAE's channel norm: over axis 1 of [N, C, T, H, W], with its SiLU;
  // more columns than one of the kernel's blocks.
  check_op({"channels silu", OpKind::kRmsNorm, attrs({{"axis", int64_t(1)}, {"activation", std::string("silu")}}),
            {f32({1, 12, 3, 20, 30}), f32({12})}});
  check_op({"channels threaded", OpKind::kRmsNorm, attrs({{"axis", int64_t(1)}, {"epsilon", 0.0f}}),
            {f32({2, 16, 2, 40, 40}), f32({16})}});
  // [3, 4] / rms 3.5355 * [1, 2] = [0.8485, 2.2627]
  const std::vector<double> got = reference_values(
      {"two", OpKind::kRmsNorm, attrs({{"epsilon", 0.0f}}), {exact({1, 2}, {3, 4}), exact({2}, {1, 2})}});
  EXPECT_NEAR(got[0], 3 / std::sqrt(12.5), 1e-6);
  EXPECT_NEAR(got[1], 8 / std::sqrt(12.5), 1e-6);
}

TEST(Fused, Rope) {
  // 3 heads of 4 pairs; tokens' angles differ.
  check_op({"heads", OpKind::kRope, {}, {f32({2, 5, 24}), f32({5, 4}, -1, 1), f32({5, 4}, -1, 1)}});
  check_op({"threaded", OpKind::kRope, {}, {f32({2, 256, 128}), f32({256, 32}, -1, 1), f32({256, 32}, -1, 1)}});
  // (1, 2) turned a quarter: (-2, 1); in both heads.
  const std::vector<double> got =
      reference_values({"quarter", OpKind::kRope, {},
                        {exact({1, 1, 4}, {1, 2, 1, 2}), exact({1, 1}, {0}), exact({1, 1}, {1})}});
  EXPECT_EQ(got, (std::vector<double>{-2, 1, -2, 1}));
}

TEST(Fused, RopeShapeErrors) {
  Graph g;
  Value* x = g.add_input("x", DType::kF32, SymShape{Dim(2), Dim(5), Dim(20)});  // not whole heads of 4 pairs
  Value* c = g.add_input("c", DType::kF32, SymShape{Dim(5), Dim(4)});
  Value* y = g.add_value("y");
  g.add_node(OpKind::kRope, "rope", {x, c, c}, {y});
  g.mark_output(y);
  Status st = graph_infer_shapes(g);
  EXPECT_NE(st.message().find("no whole number of heads"), std::string::npos) << st.message();
}

// kiln.Conv and kiln.Linear run kiln's GEMM with a weight packed per call
// eagerly and once in a plan: both are checked.
bool check_op_both(const OpCase& c) { return check_op(c) && check_op_in_plan(c); }

TEST(Fused, Conv) {
  const Attributes conv3 = attrs({{"kernel_shape", std::vector<int64_t>{3, 3}}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}});
  for (const char* act : {"none", "swish", "gelu"}) {
    Attributes a = conv3;
    a.set("activation", std::string(act));
    check_op_both({std::string("3x3 ") + act, OpKind::kFusedConv, a, {f32({1, 8, 9, 9}), f32({16, 8, 3, 3}), f32({16})}});
    check_op_both({std::string("3x3 residual ") + act, OpKind::kFusedConv, a,
              {f32({2, 4, 6, 7}), f32({4, 4, 3, 3}), f32({4}), f32({2, 4, 6, 7})}});
    // Fewer pixels an image than any target's GEMM panel is wide: the images'
    // pixels together are the rows (18 here: a full tile and a short one).
    check_op_both({std::string("3x3 few pixels, residual ") + act, OpKind::kFusedConv, a,
                   {f32({3, 12, 2, 3}), f32({10, 12, 3, 3}), f32({10}), f32({3, 10, 2, 3})}});
    // Output rows of whole panels: the patches read in place.
    check_op_both({std::string("3x3 32 wide, residual ") + act, OpKind::kFusedConv, a,
                   {f32({1, 8, 4, 32}), f32({16, 8, 3, 3}), f32({16}), f32({1, 16, 4, 32})}});
  }
  // Bands of output rows in one product, more output channels than a block
  // of the GEMM's rows and K past one slice: the bias, activation and
  // residual land once on every output.
  Attributes wide = conv3;
  wide.set("activation", std::string("swish"));
  check_op_both({"3x3 100 outputs, K past a slice, residual swish", OpKind::kFusedConv, wide,
                 {f32({1, 130, 16, 32}), f32({100, 130, 3, 3}), f32({100}), f32({1, 100, 16, 32})}});
  Attributes strided = attrs({{"kernel_shape", std::vector<int64_t>{1, 1}}, {"strides", std::vector<int64_t>{2, 2}},
                              {"activation", std::string("relu")}});
  check_op_both({"1x1 strided, no bias, residual", OpKind::kFusedConv, strided,
            {f32({1, 6, 8, 8}), f32({5, 6, 1, 1}), absent(), f32({1, 5, 4, 4})}});
}

TEST(Fused, Linear) {
  for (const char* act : {"none", "gelu", "gelu_tanh", "swish", "relu"}) {
    check_op_both({std::string("bias ") + act, OpKind::kLinear, attrs({{"activation", std::string(act)}, {"alpha", 1.702f}}),
              {f32({2, 9, 33}), f32({33, 20}), f32({20})}});
    check_op_both({std::string("residual ") + act, OpKind::kLinear, attrs({{"activation", std::string(act)}}),
              {f32({4, 64}), f32({64, 48}), f32({48}), f32({4, 48})}});
  }
  check_op_both({"large, threaded", OpKind::kLinear, attrs({{"activation", std::string("gelu")}}),
            {f32({2, 128, 256}), f32({256, 192}), f32({192}), f32({2, 128, 192})}, 1, 1e-4});
  check_op_both({"ragged, deep", OpKind::kLinear, attrs({{"activation", std::string("gelu_tanh")}}),
                 {f32({13, 300}), f32({300, 70}), f32({70}), f32({13, 70})}, 1, 1e-4});
  // Past one K slice of the GEMM (16384): the activation and the residual
  // once, after the last slice's products, not after each.
  check_op_both({"past one K slice", OpKind::kLinear, attrs({{"activation", std::string("gelu_tanh")}}),
                 {f32({3, 16500}), f32({16500, 40}), f32({40}), f32({3, 40})}, 1, 1e-4});
  // DiT's adaLN-Zero gate (input 4): one row of N for each batch entry's
  // rows, or one for every row; with or without a residual; then runs past
  // a 96-row block with a weight whose panels are prefetched (> 1 MiB).
  check_op_both({"gate per batch entry, residual", OpKind::kLinear, attrs({{"activation", std::string("none")}}),
                 {f32({2, 40, 33}), f32({33, 50}), f32({50}), f32({2, 40, 50}), f32({2, 1, 50})}});
  check_op_both({"gate for all rows, gelu_tanh, no residual", OpKind::kLinear,
                 attrs({{"activation", std::string("gelu_tanh")}}),
                 {f32({3, 17, 64}), f32({64, 48}), f32({48}), absent(), f32({48})}});
  check_op_both({"gate per batch entry, threaded, prefetched", OpKind::kLinear, attrs({{"activation", std::string("none")}}),
                 {f32({2, 150, 300}), f32({300, 1000}), f32({1000}), f32({2, 150, 1000}), f32({2, 1, 1000})}, 1, 1e-4});
  // The weight as checkpoints hold it: [N, K] (transB), without a bias, and
  // stored in f16 or bf16 (widened by the executors, kernel.h).
  const Attributes trans_b = attrs({{"transB", int64_t(1)}});
  check_op_both({"transB, no bias", OpKind::kLinear, trans_b, {f32({2, 9, 33}), f32({20, 33})}});
  check_op_both({"transB, large, threaded", OpKind::kLinear, trans_b,
                 {f32({2, 128, 256}), f32({192, 256}), f32({192})}, 1, 1e-4});
  check_op_both({"transB, weight stored f16", OpKind::kLinear, trans_b,
                 {f32({3, 40}), typed(DType::kF16, {24, 40}), f32({24})}});
  check_op_both({"weight stored bf16, residual", OpKind::kLinear, attrs({{"activation", std::string("gelu")}}),
                 {f32({3, 40}), typed(DType::kBF16, {40, 24}), f32({24}), f32({3, 24})}});
}

TEST(Fused, ConvWithStoredWeight) {
  const Attributes conv3 = attrs({{"kernel_shape", std::vector<int64_t>{3, 3}}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}});
  check_op_both({"3x3 weight stored f16", OpKind::kFusedConv, conv3,
                 {f32({1, 8, 9, 9}), typed(DType::kF16, {16, 8, 3, 3}), f32({16})}});
  check_op_both({"1x1 weight stored bf16, no bias", OpKind::kFusedConv, attrs({{"kernel_shape", std::vector<int64_t>{1, 1}}}),
                 {f32({2, 6, 5, 5}), typed(DType::kBF16, {7, 6, 1, 1})}});
}

}  // namespace
}  // namespace kiln::testing
