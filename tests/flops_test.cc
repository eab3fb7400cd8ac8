// node_flops (runtime/profile.h): each counted op's multiply-adds, worked out by hand.
#include <gtest/gtest.h>

#include "runtime/profile.h"

namespace kiln {
namespace {

Value* value(Graph& g, const char* name, std::vector<int64_t> dims) {
  Value* v = g.add_value(name);
  SymShape shape;
  for (int64_t d : dims) shape.push_back(Dim(d));
  v->shape = shape;
  return v;
}

int64_t flops(OpKind op, std::vector<std::vector<int64_t>> inputs, std::vector<int64_t> out,
              Attributes attrs = {}) {
  Graph g;
  std::vector<Value*> in;
  for (size_t i = 0; i < inputs.size(); ++i) in.push_back(value(g, ("in" + std::to_string(i)).c_str(), inputs[i]));
  const Node* n = g.add_node(op, "node", in, {value(g, "out", out)}, std::move(attrs));
  return node_flops(*n);
}

TEST(Flops, MatMulAndLinearCountTwicePerMultiplyAdd) {
  EXPECT_EQ(flops(OpKind::kMatMul, {{2, 3, 4}, {4, 5}}, {2, 3, 5}), 2 * 2 * 3 * 5 * 4);
  EXPECT_EQ(flops(OpKind::kLinear, {{6, 8}, {8, 16}, {16}}, {6, 16}), 2 * 6 * 16 * 8);
  Attributes trans_a;
  trans_a.set("transA", int64_t(1));
  EXPECT_EQ(flops(OpKind::kGemm, {{7, 3}, {7, 5}}, {3, 5}, trans_a), 2 * 3 * 5 * 7);
}

TEST(Flops, ConvolutionsCountTheirGroupsKernel) {
  // 8 -> 6 channels in 2 groups, 3x3: each output sums 4 x 3 x 3 products.
  EXPECT_EQ(flops(OpKind::kConv, {{1, 8, 10, 10}, {6, 4, 3, 3}}, {1, 6, 10, 10}), 2 * 600 * 36);
  EXPECT_EQ(flops(OpKind::kFusedConv, {{1, 8, 10, 10}, {6, 4, 3, 3}}, {1, 6, 10, 10}), 2 * 600 * 36);
  // Each of the 2 x 4 x 4 inputs scatters into 3 outputs x 2 x 2 taps.
  EXPECT_EQ(flops(OpKind::kConvTranspose, {{1, 2, 4, 4}, {2, 3, 2, 2}}, {1, 3, 8, 8}), 2 * 32 * 12);
}

TEST(Flops, AttentionCountsBothProductsThroughItsPerms) {
  // Q, K, V as [B=2, S, H=4, D=8], read as [B, H, S, D] (K as [B, H, D, S]):
  // 2 * B*H*Sq * Sk * (D + Dv).
  Attributes perms;
  perms.set("q_perm", std::vector<int64_t>{0, 2, 1, 3});
  perms.set("k_perm", std::vector<int64_t>{0, 2, 3, 1});
  perms.set("v_perm", std::vector<int64_t>{0, 2, 1, 3});
  perms.set("scale", 0.35f);
  EXPECT_EQ(flops(OpKind::kAttention, {{2, 16, 4, 8}, {2, 32, 4, 8}, {2, 32, 4, 8}}, {2, 16, 4, 8}, perms),
            2 * (2 * 4 * 16) * 32 * (8 + 8));
  // fuse_qkv's: Q, K and V 4 heads each of one [2, 16, 12, 8] tensor.
  Attributes sliced = perms;
  sliced.set("q_slice", std::vector<int64_t>{2, 0, 4});
  sliced.set("k_slice", std::vector<int64_t>{2, 4, 4});
  sliced.set("v_slice", std::vector<int64_t>{2, 8, 4});
  EXPECT_EQ(flops(OpKind::kAttention, {{2, 16, 12, 8}, {2, 16, 12, 8}, {2, 16, 12, 8}}, {2, 16, 4, 8}, sliced),
            2 * (2 * 4 * 16) * 16 * (8 + 8));
}

TEST(Flops, UncountedOpsAndUnknownShapesAreZero) {
  EXPECT_EQ(flops(OpKind::kAdd, {{4, 4}, {4, 4}}, {4, 4}), 0);
  Graph g;
  Value* a = g.add_value("a");  // rank unknown
  const Node* n = g.add_node(OpKind::kMatMul, "mm", {a, value(g, "b", {4, 5})}, {value(g, "y", {3, 5})});
  EXPECT_EQ(node_flops(*n), 0);
}

}  // namespace
}  // namespace kiln
