// MatMul, Gemm, Conv, ConvTranspose, Einsum: CPU (kiln's GEMM, oneDNN)
// against the reference, eagerly and in a compiled plan; the reference
// against hand-computed values; and inference errors.
#include <gtest/gtest.h>
#include <hwy/targets.h>
#include <omp.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <random>

#include "ir/shape_inference.h"
#include "kernels/cpu/gemm.h"
#include "op_test_util.h"

namespace kiln::testing {
namespace {

using Ints = std::vector<int64_t>;
AttributeValue i(int64_t v) { return v; }
AttributeValue s(const char* v) { return std::string(v); }

// Contractions over up to ~600 terms in f32.
constexpr double kConvTolerance = 1e-4;

TEST(Linalg, MatMul) {
  const std::vector<OpCase> rows = {
      {"2d", OpKind::kMatMul, {}, {f32({3, 4}), f32({4, 5})}},
      {"vector x matrix", OpKind::kMatMul, {}, {f32({4}), f32({4, 5})}},
      {"matrix x vector", OpKind::kMatMul, {}, {f32({3, 4}), f32({4})}},
      {"vector x vector", OpKind::kMatMul, {}, {f32({7}), f32({7})}},
      {"batched vector x matrix", OpKind::kMatMul, {}, {f32({4}), f32({2, 4, 5})}},
      {"batched matrix x vector", OpKind::kMatMul, {}, {f32({2, 3, 4}), f32({4})}},
      {"batched", OpKind::kMatMul, {}, {f32({2, 3, 4}), f32({2, 4, 5})}},
      {"batch broadcast both ways", OpKind::kMatMul, {}, {f32({2, 1, 3, 4}), f32({1, 5, 4, 6})}},
      {"2-d A over batched B", OpKind::kMatMul, {}, {f32({3, 4}), f32({2, 4, 5})}},
      {"2-d weight over batch", OpKind::kMatMul, {}, {f32({2, 64, 32}), f32({32, 48})}},
      {"attention scores", OpKind::kMatMul, {}, {f32({2, 4, 16, 8}), f32({2, 4, 8, 16})}},
      {"attention values", OpKind::kMatMul, {}, {f32({2, 4, 16, 16}), f32({2, 4, 16, 8})}},
      {"rank 5", OpKind::kMatMul, {}, {f32({2, 1, 2, 3, 4}), f32({3, 1, 4, 2})}},
      {"zero rows", OpKind::kMatMul, {}, {f32({0, 4}), f32({4, 5})}},
      {"zero batch", OpKind::kMatMul, {}, {f32({0, 3, 4}), f32({4, 5})}},
      {"zero inner dim", OpKind::kMatMul, {}, {f32({3, 0}), f32({0, 5})}},
  };
  for (const OpCase& c : rows) check_op(c) && check_op_in_plan(c);
}

TEST(Linalg, Gemm) {
  const std::vector<OpCase> rows = {
      {"no C", OpKind::kGemm, {}, {f32({3, 4}), f32({4, 5})}},
      {"matrix C", OpKind::kGemm, {}, {f32({3, 4}), f32({4, 5}), f32({3, 5})}},
      {"vector C", OpKind::kGemm, {}, {f32({3, 4}), f32({4, 5}), f32({5})}},
      {"row C", OpKind::kGemm, {}, {f32({3, 4}), f32({4, 5}), f32({1, 5})}},
      {"column C", OpKind::kGemm, {}, {f32({3, 4}), f32({4, 5}), f32({3, 1})}},
      {"scalar C", OpKind::kGemm, {}, {f32({3, 4}), f32({4, 5}), f32({})}},
      {"transB (linear layer)", OpKind::kGemm, attrs({{"transB", i(1)}}),
       {f32({8, 32}), f32({48, 32}), f32({48})}},
      {"transA", OpKind::kGemm, attrs({{"transA", i(1)}}), {f32({4, 3}), f32({4, 5}), f32({5})}},
      {"transA transB", OpKind::kGemm, attrs({{"transA", i(1)}, {"transB", i(1)}}),
       {f32({4, 3}), f32({5, 4})}},
      {"alpha beta", OpKind::kGemm, attrs({{"alpha", 0.5f}, {"beta", -2.0f}}),
       {f32({3, 4}), f32({4, 5}), f32({3, 5})}},
      {"alpha only", OpKind::kGemm, attrs({{"alpha", 3.0f}}), {f32({3, 4}), f32({4, 5})}},
      {"beta zero ignores C", OpKind::kGemm, attrs({{"beta", 0.0f}}),
       {f32({3, 4}), f32({4, 5}), f32({3, 5})}},
      {"zero inner dim", OpKind::kGemm, attrs({{"beta", 2.0f}}), {f32({3, 0}), f32({0, 5}), f32({5})}},
      {"zero rows", OpKind::kGemm, {}, {f32({0, 4}), f32({4, 5}), f32({5})}},
  };
  for (const OpCase& c : rows) check_op(c) && check_op_in_plan(c);
}

using AttrList = std::vector<std::pair<std::string, AttributeValue>>;

// A Conv or ConvTranspose row.
OpCase conv_case(OpKind op, std::string label, AttrList a, std::vector<InputSpec> in) {
  Attributes at;
  for (auto& [k, v] : a) at.set(k, v);
  return OpCase{std::move(label), op, std::move(at), std::move(in), 1, kConvTolerance};
}

TEST(Linalg, Conv) {
  auto conv = [](std::string label, AttrList a, std::vector<InputSpec> in) {
    return conv_case(OpKind::kConv, std::move(label), std::move(a), std::move(in));
  };
  const std::vector<OpCase> rows = {
      conv("3x3 pad 1 (UNet)", {{"pads", Ints{1, 1, 1, 1}}},
           {f32({1, 32, 12, 12}), f32({48, 32, 3, 3}), f32({48})}),
      conv("1x1", {}, {f32({2, 16, 7, 9}), f32({8, 16, 1, 1}), f32({8})}),
      conv("stride 2 (downsample)", {{"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}},
           {f32({1, 8, 11, 10}), f32({8, 8, 3, 3}), f32({8})}),
      conv("no bias", {}, {f32({1, 3, 6, 6}), f32({4, 3, 3, 3})}),
      conv("asymmetric pads", {{"pads", Ints{0, 1, 2, 0}}}, {f32({1, 2, 5, 5}), f32({3, 2, 2, 3})}),
      conv("dilation", {{"dilations", Ints{2, 3}}}, {f32({1, 2, 9, 10}), f32({2, 2, 3, 2})}),
      conv("groups", {{"group", i(2)}}, {f32({1, 4, 6, 6}), f32({6, 2, 3, 3}), f32({6})}),
      conv("depthwise", {{"group", i(4)}, {"pads", Ints{1, 1, 1, 1}}},
           {f32({2, 4, 6, 6}), f32({4, 1, 3, 3}), f32({4})}),
      conv("same upper stride 2", {{"auto_pad", s("SAME_UPPER")}, {"strides", Ints{2, 2}}},
           {f32({1, 2, 6, 7}), f32({3, 2, 4, 3})}),
      conv("same lower stride 2", {{"auto_pad", s("SAME_LOWER")}, {"strides", Ints{2, 2}}},
           {f32({1, 2, 6, 7}), f32({3, 2, 4, 3})}),
      conv("valid stride 2", {{"auto_pad", s("VALID")}, {"strides", Ints{2, 2}}},
           {f32({1, 2, 8, 7}), f32({3, 2, 3, 3})}),
      conv("kernel_shape attribute", {{"kernel_shape", Ints{3, 3}}}, {f32({1, 2, 5, 5}), f32({2, 2, 3, 3})}),
      conv("1-d", {{"pads", Ints{1, 2}}, {"strides", Ints{2}}}, {f32({2, 3, 11}), f32({4, 3, 3}), f32({4})}),
      conv("3-d", {{"pads", Ints{1, 1, 1, 1, 1, 1}}}, {f32({1, 2, 4, 5, 6}), f32({3, 2, 3, 3, 3}), f32({3})}),
      // 3-D on kiln's GEMM: a causal video conv (2 frames of padding in
      // front only), patch embedding (stride = kernel), depth strides and
      // dilations, more pixels than a chunk of panels, two images.
      conv("3-d causal", {{"pads", Ints{2, 1, 1, 0, 1, 1}}},
           {f32({2, 5, 3, 6, 40}), f32({7, 5, 3, 3, 3}), f32({7})}),
      conv("3-d patch embedding", {{"strides", Ints{1, 2, 2}}}, {f32({1, 6, 3, 8, 10}), f32({16, 6, 1, 2, 2}), f32({16})}),
      conv("3-d strided, dilated", {{"strides", Ints{2, 1, 1}}, {"dilations", Ints{2, 1, 2}}, {"pads", Ints{1, 0, 2, 1, 0, 2}}},
           {f32({1, 3, 7, 5, 9}), f32({4, 3, 2, 3, 3}), absent()}),
      conv("3-d many pixels", {{"pads", Ints{1, 1, 1, 1, 1, 1}}}, {f32({1, 4, 5, 16, 48}), f32({6, 4, 3, 3, 3})}),
      conv("zero batch", {}, {f32({0, 2, 5, 5}), f32({3, 2, 3, 3})}),
      // Stride 1 with output rows of whole GEMM panels (32 and 64 wide, which
      // every target's panel divides): the patches are read in place from
      // the padded input, or from the input itself without padding.
      conv("3x3 pad 1, 32 wide", {{"pads", Ints{1, 1, 1, 1}}},
           {f32({2, 12, 5, 32}), f32({20, 12, 3, 3}), f32({20})}),
      conv("1x1, 64 wide", {}, {f32({1, 16, 3, 64}), f32({8, 16, 1, 1}), f32({8})}),
      conv("asymmetric pads and dilation, 32 wide", {{"pads", Ints{1, 2, 0, 2}}, {"dilations", Ints{2, 2}}},
           {f32({1, 3, 6, 32}), f32({4, 3, 3, 3})}),
      conv("1-d, 64 long, one image", {{"pads", Ints{1, 1}}}, {f32({1, 4, 64}), f32({40, 4, 3}), f32({40})}),
      // Enough rows for bands of several output rows per product (a segment
      // of B each), the last band short on some team sizes.
      conv("3x3 pad 1, 32 wide, bands of rows", {{"pads", Ints{1, 1, 1, 1}}},
           {f32({1, 4, 22, 32}), f32({6, 4, 3, 3}), f32({6})}),
      conv("3x3 pad 1, 64 wide, bands of rows", {{"pads", Ints{1, 1, 1, 1}}},
           {f32({2, 3, 12, 64}), f32({5, 3, 3, 3})}),
      // More output channels than the GEMM's blocks of rows (96) and a patch
      // past one slice of K (1152): the blocks and slices, in place and
      // through im2col (16 wide).
      conv("3x3 pad 1, 100 outputs, K past a slice, 32 wide", {{"pads", Ints{1, 1, 1, 1}}},
           {f32({1, 130, 16, 32}), f32({100, 130, 3, 3}), f32({100})}),
      conv("3x3 pad 1, 100 outputs, K past a slice, 16 wide", {{"pads", Ints{1, 1, 1, 1}}},
           {f32({1, 130, 6, 16}), f32({100, 130, 3, 3}), f32({100})}),
  };
  for (const OpCase& c : rows) check_op(c) && check_op_in_plan(c);
}

// What the video models' plans run: 3-D convolutions on kiln's GEMM and
// Einsum (an unpatchify permutation, a contraction) replay without a heap
// allocation.
TEST(Linalg, VideoOpsReplayWithoutAllocating) {
  const std::vector<OpCase> rows = {
      conv_case(OpKind::kConv, "3-d causal", {{"pads", Ints{2, 1, 1, 0, 1, 1}}},
                {f32({1, 5, 3, 6, 40}), f32({7, 5, 3, 3, 3}), f32({7})}),
      conv_case(OpKind::kConv, "3-d patch embedding", {{"strides", Ints{1, 2, 2}}},
                {f32({1, 6, 3, 8, 10}), f32({16, 6, 1, 2, 2}), f32({16})}),
      {"einsum unpatchify", OpKind::kEinsum, attrs({{"equation", s("nfhwpqrc->ncfphqwr")}}),
       {f32({1, 2, 3, 4, 1, 2, 2, 5})}},
      {"einsum contraction", OpKind::kEinsum, attrs({{"equation", s("bhid,bhjd->bhij")}}),
       {f32({2, 3, 5, 8}), f32({2, 3, 6, 8})}},
      {"einsum contraction, copied operand", OpKind::kEinsum, attrs({{"equation", s("ibd,jbd->bij")}}),
       {f32({4, 2, 8}), f32({5, 2, 8})}},
      {"einsum sum", OpKind::kEinsum, attrs({{"equation", s("ij->i")}}), {f32({3, 4})}},
  };
  if (replay_allocations(rows[0]) < 0) GTEST_SKIP() << "no heap counter (sanitizer build)";
  for (const OpCase& c : rows) {
    EXPECT_TRUE(check_op_in_plan(c)) << c.label;
    EXPECT_EQ(replay_allocations(c), 0) << c.label;
  }
}

TEST(Linalg, ConvTranspose) {
  auto deconv = [](std::string label, AttrList a, std::vector<InputSpec> in) {
    return conv_case(OpKind::kConvTranspose, std::move(label), std::move(a), std::move(in));
  };
  const std::vector<OpCase> rows = {
      deconv("basic", {}, {f32({1, 3, 4, 4}), f32({3, 2, 3, 3}), f32({2})}),
      deconv("stride 2 upsample", {{"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}, {"output_padding", Ints{1, 1}}},
             {f32({1, 8, 5, 6}), f32({8, 4, 3, 3}), f32({4})}),
      deconv("stride 2 kernel 4 (VAE style)", {{"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}},
             {f32({2, 4, 5, 5}), f32({4, 4, 4, 4})}),
      deconv("asymmetric pads", {{"strides", Ints{3, 2}}, {"pads", Ints{1, 2, 0, 1}}},
             {f32({1, 2, 3, 3}), f32({2, 3, 3, 3})}),
      deconv("dilation", {{"dilations", Ints{2, 2}}}, {f32({1, 1, 3, 3}), f32({1, 2, 2, 2})}),
      deconv("groups", {{"group", i(2)}, {"strides", Ints{2, 2}}},
             {f32({1, 4, 3, 3}), f32({4, 3, 3, 3}), f32({6})}),
      deconv("output_shape", {{"strides", Ints{3, 2}}, {"output_shape", Ints{10, 8}}},
             {f32({1, 1, 3, 3}), f32({1, 2, 3, 3})}),
      deconv("output_shape past the full result", {{"strides", Ints{2, 2}}, {"output_shape", Ints{9, 10}}},
             {f32({1, 2, 3, 3}), f32({2, 2, 2, 2}), f32({2})}),
      deconv("output_shape past the full result, same upper",
             {{"auto_pad", s("SAME_UPPER")}, {"strides", Ints{2, 1}}, {"output_shape", Ints{10, 7}}},
             {f32({1, 2, 3, 3}), f32({2, 2, 2, 2})}),
      deconv("same upper", {{"auto_pad", s("SAME_UPPER")}, {"strides", Ints{2, 2}}},
             {f32({1, 2, 3, 4}), f32({2, 2, 3, 3})}),
      deconv("same lower", {{"auto_pad", s("SAME_LOWER")}, {"strides", Ints{2, 2}}},
             {f32({1, 2, 3, 4}), f32({2, 2, 3, 3})}),
      deconv("1-d", {{"strides", Ints{2}}}, {f32({2, 3, 5}), f32({3, 2, 3}), f32({2})}),
      deconv("3-d", {{"strides", Ints{2, 1, 2}}, {"pads", Ints{1, 0, 0, 0, 1, 1}}},
             {f32({1, 2, 3, 4, 3}), f32({2, 3, 3, 2, 3}), f32({3})}),
      deconv("zero batch", {}, {f32({0, 2, 3, 3}), f32({2, 2, 3, 3})}),
  };
  for (const OpCase& c : rows) check_op(c) && check_op_in_plan(c);
}

TEST(Linalg, Einsum) {
  auto einsum = [](const char* eq, std::vector<InputSpec> in) {
    return OpCase{eq, OpKind::kEinsum, attrs({{"equation", s(eq)}}), std::move(in)};
  };
  const std::vector<OpCase> rows = {
      einsum("bhid,bhjd->bhij", {f32({2, 3, 5, 8}), f32({2, 3, 6, 8})}),
      einsum("bhij,bhjd->bhid", {f32({2, 3, 5, 6}), f32({2, 3, 6, 8})}),
      einsum("...ij,...jk->...ik", {f32({2, 3, 4, 5}), f32({2, 3, 5, 6})}),
      einsum("...ij,...jk->...ik", {f32({2, 1, 4, 5}), f32({3, 5, 6})}),  // broadcast batch
      einsum("bij, bjk -> bik", {f32({5, 2, 3}), f32({5, 3, 4})}),
      einsum("bji,bjk->bik", {f32({2, 3, 4}), f32({2, 3, 5})}),  // A transposed
      einsum("ibd,jbd->bij", {f32({4, 2, 8}), f32({5, 2, 8})}),  // both copied
      einsum("ij,jk->ki", {f32({3, 4}), f32({4, 5})}),          // result permuted
      einsum("ij,jk", {f32({3, 4}), f32({4, 5})}),              // implicit output
      einsum("Ab,bC->AC", {f32({3, 4}), f32({4, 2})}),
      einsum("i,i", {f32({5}), f32({5})}),
      einsum("i,j->ij", {f32({3}), f32({4})}),
      einsum("ij,ij->ij", {f32({3, 4}), f32({3, 4})}),
      einsum("ij,ij->", {f32({3, 4}), f32({3, 4})}),
      einsum("ij->ji", {f32({3, 4})}),
      einsum("ij->i", {f32({3, 4})}),
      einsum("ij->", {f32({3, 4})}),
      einsum("ii->i", {f32({4, 4})}),
      einsum("...ii->...i", {f32({3, 5, 5})}),
      einsum("ij,jk,kl->il", {f32({2, 3}), f32({3, 4}), f32({4, 2})}),
      einsum("ij,j->i", {f32({3, 4}), f32({4})}),
      einsum("bij,bj->bi", {f32({2, 3, 4}), f32({1, 4})}),
      einsum(",ij->ij", {f32({}), f32({2, 3})}),         // a scalar operand
      einsum("i->", {f32({0})}),
      einsum("ij,jk->ik", {f32({3, 0}), f32({0, 5})}),  // empty contraction
      einsum("ij,jk->ik", {f32({0, 2}), f32({2, 5})}),
      einsum("ij->i", {typed(DType::kF64, {3, 4})}),
      einsum("bij,bjk->bik", {typed(DType::kF64, {2, 3, 4}), typed(DType::kF64, {2, 4, 2})}),
  };
  for (const OpCase& c : rows) check_op(c) && check_op_in_plan(c);
}

// Shapes Stable Diffusion's UNet/VAE and DiT use, scaled down to keep the
// reference quick but large enough that oneDNN picks its production kernels.
TEST(Linalg, DiffusionShapes) {
  const std::vector<OpCase> rows = {
      {"conv 3x3 pad 1", OpKind::kConv, attrs({{"pads", Ints{1, 1, 1, 1}}}),
       {f32({1, 64, 16, 16}), f32({64, 64, 3, 3}), f32({64})}, 1, kConvTolerance},
      {"conv 1x1 skip", OpKind::kConv, {}, {f32({2, 96, 8, 8}), f32({64, 96, 1, 1}), f32({64})}, 1, kConvTolerance},
      {"conv stride 2", OpKind::kConv, attrs({{"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}}),
       {f32({1, 64, 16, 16}), f32({64, 64, 3, 3}), f32({64})}, 1, kConvTolerance},
      {"patchify conv (DiT)", OpKind::kConv, attrs({{"strides", Ints{2, 2}}}),
       {f32({2, 4, 16, 16}), f32({96, 4, 2, 2}), f32({96})}, 1, kConvTolerance},
      {"attention q.kT", OpKind::kMatMul, {}, {f32({2, 8, 64, 40}), f32({2, 8, 40, 64})}, 1, kConvTolerance},
      {"attention p.v", OpKind::kMatMul, {}, {f32({2, 8, 64, 64}), f32({2, 8, 64, 40})}, 1, kConvTolerance},
      {"projection [B,N,C]x[C,C2]", OpKind::kMatMul, {}, {f32({2, 256, 320}), f32({320, 640})}, 1, kConvTolerance},
      {"time embedding linear", OpKind::kGemm, attrs({{"transB", i(1)}}),
       {f32({2, 320}), f32({1280, 320}), f32({1280})}, 1, kConvTolerance},
      // Rows and columns that fill neither a tile nor a panel, and (the
      // first) past one K slice of the GEMM (16384). A last panel of at
      // most one vector's columns (40 and 70 here, 300 below with AVX-512)
      // runs on half-width tiles, a wider one (21) on whole ones.
      {"past one K slice", OpKind::kMatMul, {}, {f32({2, 5, 16500}), f32({16500, 40})}, 1, kConvTolerance},
      {"ragged, deep", OpKind::kMatMul, {}, {f32({3, 37, 600}), f32({600, 70})}, 1, kConvTolerance},
      // B past 1 MiB packed, whose next panel the tiles prefetch: rows past
      // two 96-row blocks, K not a whole number of prefetched lines, a ragged
      // last panel.
      {"wide weight, prefetched panels", OpKind::kMatMul, {}, {f32({200, 1030}), f32({1030, 300})}, 1, kConvTolerance},
      {"ragged, deep, batched", OpKind::kMatMul, {}, {f32({3, 13, 300}), f32({3, 300, 21})}, 1, kConvTolerance},
      {"ragged, deep gemm", OpKind::kGemm, attrs({{"transA", i(1)}, {"transB", i(1)}, {"alpha", 0.5f}, {"beta", 2.0f}}),
       {f32({300, 13}), f32({70, 300}), f32({70})}, 1, kConvTolerance},
      // A UNet's 4x4 level: fewer pixels an image than an AVX-512 panel is
      // wide; then fewer than any target's, strided.
      {"conv, few pixels", OpKind::kConv, attrs({{"pads", Ints{1, 1, 1, 1}}}),
       {f32({2, 48, 4, 4}), f32({40, 48, 3, 3}), f32({40})}, 1, kConvTolerance},
      {"conv, few pixels, strided", OpKind::kConv, attrs({{"strides", Ints{2, 2}}, {"pads", Ints{1, 0, 1, 0}}}),
       {f32({3, 20, 5, 6}), f32({9, 20, 3, 3}), absent()}, 1, kConvTolerance},
      {"conv, deep", OpKind::kConv, attrs({{"pads", Ints{1, 1, 1, 1}}}),
       {f32({1, 40, 7, 9}), f32({19, 40, 3, 3}), f32({19})}, 1, kConvTolerance},
      {"attention einsum", OpKind::kEinsum, attrs({{"equation", s("bhid,bhjd->bhij")}}),
       {f32({2, 8, 64, 40}), f32({2, 8, 77, 40})}, 1, kConvTolerance},
  };
  for (const OpCase& c : rows) check_op(c) && check_op_in_plan(c);
}

// kiln's GEMM (and so MatMul, Gemm, kiln.Linear and the ungrouped convs)
// is compiled for each SIMD target, its tiles and panels as wide as the
// target's vectors, and a CI machine may pick another target than this one
// does, so check each: products past a tile, a panel, a 96-row block and a
// K slice, a weight past L2 (prefetched panels), the fused epilogue with a
// gate, and each conv path (im2col, rows in place, pixels as rows).
TEST(Linalg, EveryHighwayTarget) {
  const Attributes gelu = attrs({{"activation", s("gelu")}});
  const Attributes pad1 = attrs({{"pads", Ints{1, 1, 1, 1}}});
  const std::vector<OpCase> rows = {
      {"matmul ragged", OpKind::kMatMul, {}, {f32({3, 37, 60}), f32({60, 70})}},
      {"matmul past a block and a slice", OpKind::kMatMul, {}, {f32({1, 101, 1300}), f32({1300, 21})}},
      {"matmul weight past L2", OpKind::kMatMul, {}, {f32({100, 1030}), f32({1030, 300})}},
      {"matmul batched", OpKind::kMatMul, {}, {f32({2, 3, 13, 30}), f32({2, 3, 30, 21})}},
      {"gemm transB, C", OpKind::kGemm, attrs({{"transB", i(1)}}), {f32({8, 32}), f32({48, 32}), f32({48})}},
      // B's columns along its rows, K not a multiple of 16, a cut last
      // panel; in a plan, packed on the threads.
      {"gemm transB, ragged", OpKind::kGemm, attrs({{"transB", i(1)}}), {f32({5, 401}), f32({100, 401})}},
      {"linear gelu + residual", OpKind::kLinear, gelu, {f32({2, 29, 40}), f32({40, 36}), f32({36}), f32({2, 29, 36})}},
      {"linear gated + residual", OpKind::kLinear, {},
       {f32({2, 24, 40}), f32({40, 36}), f32({36}), f32({2, 24, 36}), f32({2, 1, 36})}},
      {"conv im2col", OpKind::kConv, pad1, {f32({1, 12, 9, 10}), f32({20, 12, 3, 3}), f32({20})}, 1, kConvTolerance},
      {"conv rows in place, 32 wide", OpKind::kConv, pad1, {f32({2, 6, 7, 32}), f32({10, 6, 3, 3}), f32({10})}, 1,
       kConvTolerance},
      {"conv few pixels", OpKind::kConv, pad1, {f32({2, 24, 2, 2}), f32({16, 24, 3, 3}), f32({16})}, 1,
       kConvTolerance},
      {"conv 1-d", OpKind::kConv, attrs({{"pads", Ints{1, 1}}}), {f32({2, 4, 40}), f32({12, 4, 3}), f32({12})}, 1,
       kConvTolerance},
  };
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    SCOPED_TRACE(hwy::TargetName(target));
    hwy::SetSupportedTargetsForTest(target);
    for (const OpCase& c : rows) check_op(c) && check_op_in_plan(c);
  }
  hwy::SetSupportedTargetsForTest(0);
}

// kiln's GEMM splits C into a part for each of omp_get_max_threads()
// threads, and a thread done with its own part takes the rest's tiles. In a
// nested region (one thread, while omp_get_max_threads() still says 2) the
// one thread must take every tile of the other part, with their bias and
// residual at the right rows and columns; each of the outer region's two
// threads runs its own product so.
TEST(Linalg, GemmThreadTakesOtherPartsTiles) {
  const int threads = omp_get_max_threads(), levels = omp_get_max_active_levels();
  omp_set_num_threads(2);
  omp_set_max_active_levels(1);
  constexpr int64_t m = 230, n = 300, k = 70;  // three 96-row tiles by three 4-panel tiles in each half
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto random = [&](int64_t count) {
    std::vector<float> v(static_cast<size_t>(count));
    for (float& x : v) x = u(rng);
    return v;
  };
  const std::vector<float> a = random(m * k), b = random(k * n), bias = random(n), residual = random(m * n);
  // Packed B in 64-byte-aligned memory, as kiln's arena gives it.
  const std::unique_ptr<float, decltype(&std::free)> packed(
      static_cast<float*>(std::aligned_alloc(64, size_t(gemm::packed_floats(k, n)) * sizeof(float) + 64)), &std::free);
  gemm::pack(b.data(), n, 1, k, n, packed.get());
  std::vector<float> c[2] = {std::vector<float>(size_t(m * n)), std::vector<float>(size_t(m * n))};
  int inner_max[2] = {0, 0}, inner_team[2] = {0, 0};
#pragma omp parallel num_threads(2)
  {
    const int t = omp_get_thread_num();
    gemm::Epilogue e;
    e.bias = bias.data();
    e.residual = residual.data();
    gemm::multiply({m, n, k, a.data(), k, packed.get(), c[t].data(), n}, e, true);
    inner_max[t] = omp_get_max_threads();
#pragma omp parallel
    inner_team[t] = omp_get_num_threads();
  }
  omp_set_max_active_levels(levels);
  omp_set_num_threads(threads);
  for (int t = 0; t < 2; ++t) {
    ASSERT_EQ(inner_max[t], 2) << "the product would not be split";
    ASSERT_EQ(inner_team[t], 1) << "the nested region would not have one thread";
    double worst = 0;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double want = double(bias[size_t(j)]) + residual[size_t(i * n + j)];
        for (int64_t q = 0; q < k; ++q) want += double(a[size_t(i * k + q)]) * b[size_t(q * n + j)];
        worst = std::max(worst, std::abs(want - c[t][size_t(i * n + j)]));
      }
    EXPECT_LT(worst, 1e-4) << "thread " << t;
  }
}

std::vector<double> values_of(const Tensor& t) {
  std::vector<double> out;
  for (int64_t k = 0; k < t.numel(); ++k) out.push_back(t.element_as_double(k));
  return out;
}

InputSpec given(Shape shape, std::vector<double> v, DType dtype = DType::kF32) {
  return {dtype, std::move(shape), std::move(v)};
}

TEST(Linalg, ReferenceMatchesHandValues) {
  auto mm = run_reference({"mm", OpKind::kMatMul, {}, {given({2, 2}, {1, 2, 3, 4}), given({2, 2}, {5, 6, 7, 8})}});
  ASSERT_EQ(mm.size(), 1u);
  EXPECT_EQ(values_of(mm[0]), (std::vector<double>{19, 22, 43, 50}));

  // 0.5 * A^T B + 2 * C, C a row.
  auto gemm = run_reference({"gemm", OpKind::kGemm, attrs({{"transA", i(1)}, {"alpha", 0.5f}, {"beta", 2.0f}}),
                             {given({2, 2}, {1, 3, 2, 4}), given({2, 2}, {5, 6, 7, 8}), given({2}, {1, -1})}});
  ASSERT_EQ(gemm.size(), 1u);
  EXPECT_EQ(values_of(gemm[0]), (std::vector<double>{11.5, 9, 23.5, 23}));

  // ONNX's basic Conv example: 5x5 ramp, 3x3 ones, pad 1.
  std::vector<double> ramp(25);
  for (int k = 0; k < 25; ++k) ramp[size_t(k)] = k;
  auto conv = run_reference({"conv", OpKind::kConv, attrs({{"pads", Ints{1, 1, 1, 1}}}),
                             {given({1, 1, 5, 5}, ramp), given({1, 1, 3, 3}, {1})}});
  ASSERT_EQ(conv.size(), 1u);
  EXPECT_EQ(values_of(conv[0]), (std::vector<double>{12, 21, 27, 33, 24, 33, 54, 63, 72, 51, 63, 99, 108, 117,
                                                     81, 93, 144, 153, 162, 111, 72, 111, 117, 123, 84}));

  // ONNX's ConvTranspose dilation example.
  auto deconv = run_reference({"deconv", OpKind::kConvTranspose, attrs({{"dilations", Ints{2, 2}}}),
                               {given({1, 1, 3, 3}, {3, 8, 1, 9, 5, 7, 3, 2, 6}), given({1, 1, 2, 2}, {7, 2, 1, 9})}});
  ASSERT_EQ(deconv.size(), 1u);
  EXPECT_EQ(values_of(deconv[0]), (std::vector<double>{21, 56, 13, 16, 2, 63, 35, 67, 10, 14, 24, 22, 76, 76, 21,
                                                       9, 5, 88, 45, 63, 3, 2, 33, 18, 54}));

  // Trace, in f64 (only the reference and the Einsum loop do f64).
  auto trace = run_reference({"trace", OpKind::kEinsum, attrs({{"equation", s("ii")}}),
                              {given({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9}, DType::kF64)}});
  ASSERT_EQ(trace.size(), 1u);
  EXPECT_EQ(trace[0].shape(), Shape{});
  EXPECT_EQ(values_of(trace[0]), (std::vector<double>{15}));

  auto mm64 = run_reference({"mm f64", OpKind::kMatMul, {},
                             {given({3}, {1, 2, 3}, DType::kF64), given({3}, {4, 5, 6}, DType::kF64)}});
  ASSERT_EQ(mm64.size(), 1u);
  EXPECT_EQ(values_of(mm64[0]), (std::vector<double>{32}));
}

// Inference over a one-node graph; returns the status and the output value.
struct Inferred {
  Status status;
  std::optional<SymShape> shape;
};

Inferred infer(OpKind op, std::vector<std::optional<SymShape>> inputs, Attributes a = {}) {
  Graph g;
  std::vector<Value*> ins;
  for (size_t k = 0; k < inputs.size(); ++k)
    ins.push_back(g.add_input("in" + std::to_string(k), DType::kF32, inputs[k]));
  Value* out = g.add_value("out");
  g.add_node(op, "node", ins, {out}, std::move(a));
  Status st = graph_infer_shapes(g);
  return {st, out->shape};
}

TEST(Linalg, InferenceRejectsInvalidNodes) {
  EXPECT_FALSE(infer(OpKind::kMatMul, {SymShape{2, 3}, SymShape{4, 5}}).status.ok());
  EXPECT_FALSE(infer(OpKind::kMatMul, {SymShape{2, 3, 4}, SymShape{3, 4, 5}}).status.ok());
  EXPECT_FALSE(infer(OpKind::kMatMul, {SymShape{}, SymShape{3}}).status.ok());
  EXPECT_FALSE(infer(OpKind::kMatMul, {SymShape{3}}).status.ok());
  EXPECT_FALSE(infer(OpKind::kGemm, {SymShape{2, 3}, SymShape{3, 4}, SymShape{3, 4}}).status.ok());
  EXPECT_FALSE(infer(OpKind::kGemm, {SymShape{2, 3, 1}, SymShape{3, 4}}).status.ok());
  EXPECT_FALSE(infer(OpKind::kConv, {SymShape{1, 3, 5, 5}, SymShape{4, 2, 3, 3}}).status.ok());
  EXPECT_FALSE(infer(OpKind::kConv, {SymShape{1, 4, 5, 5}, SymShape{3, 2, 3, 3}}, attrs({{"group", i(2)}})).status.ok());
  EXPECT_FALSE(infer(OpKind::kConv, {SymShape{1, 2, 5, 5}, SymShape{3, 2, 3, 3}},
                     attrs({{"pads", Ints{-1, 0, 0, 0}}})).status.ok());
  EXPECT_FALSE(infer(OpKind::kConv, {SymShape{1, 2, 2, 2}, SymShape{3, 2, 3, 3}}).status.ok());
  EXPECT_FALSE(infer(OpKind::kConv, {SymShape{1, 2, 5, 5}, SymShape{3, 2, 3, 3}},
                     attrs({{"strides", Ints{0, 1}}})).status.ok());
  EXPECT_FALSE(infer(OpKind::kConv, {SymShape{1, 2, 5, 5}, SymShape{3, 2, 3, 3}},
                     attrs({{"kernel_shape", Ints{2, 2}}})).status.ok());
  EXPECT_FALSE(infer(OpKind::kConv, {SymShape{1, 2, 5, 5}, SymShape{3, 2, 3, 3}, SymShape{4}}).status.ok());
  EXPECT_FALSE(infer(OpKind::kConvTranspose, {SymShape{1, 3, 5, 5}, SymShape{2, 2, 3, 3}}).status.ok());
  EXPECT_FALSE(infer(OpKind::kConvTranspose, {SymShape{1, 2, 5, 5}, SymShape{2, 2, 3, 3}},
                     attrs({{"auto_pad", s("BOGUS")}})).status.ok());
  // kiln.Linear's gate: one row of N per batch entry ([2, 1, 7]) or for all ([7]).
  auto linear = [](SymShape gate) {
    return infer(OpKind::kLinear, {SymShape{2, 16, 12}, SymShape{12, 7}, SymShape{7}, SymShape{2, 16, 7}, gate});
  };
  EXPECT_TRUE(linear(SymShape{2, 1, 7}).status.ok());
  EXPECT_TRUE(linear(SymShape{7}).status.ok());
  EXPECT_FALSE(linear(SymShape{2, 16, 7}).status.ok());  // a full-size tensor
  EXPECT_FALSE(linear(SymShape{3, 1, 7}).status.ok());   // batch
  EXPECT_FALSE(linear(SymShape{2, 1, 8}).status.ok());   // N
  EXPECT_FALSE(linear(SymShape{1, 7}).status.ok());      // rank
  auto einsum = [](const char* eq, std::vector<std::optional<SymShape>> in) {
    return infer(OpKind::kEinsum, std::move(in), attrs({{"equation", s(eq)}}));
  };
  EXPECT_FALSE(einsum("ij,jk->ik", {SymShape{2, 3}}).status.ok());                 // operand count
  EXPECT_FALSE(einsum("ijk->i", {SymShape{2, 3}}).status.ok());                     // rank
  EXPECT_FALSE(einsum("ij,jk->ik", {SymShape{2, 3}, SymShape{4, 5}}).status.ok());  // sizes
  EXPECT_FALSE(einsum("i1->i", {SymShape{2, 3}}).status.ok());                      // character
  EXPECT_FALSE(einsum("ij->iz", {SymShape{2, 3}}).status.ok());                     // unknown label
  EXPECT_FALSE(einsum("ij->ii", {SymShape{2, 2}}).status.ok());                     // repeated output
}

TEST(Linalg, InferenceKeepsUnknownDims) {
  const Dim batch = Dim::named("batch");
  auto mm = infer(OpKind::kMatMul, {SymShape{batch, 8, 16, 4}, SymShape{4, 16}});
  ASSERT_TRUE(mm.status.ok()) << mm.status.message();
  EXPECT_EQ(*mm.shape, (SymShape{batch, 8, 16, 16}));
  auto unknown_rank = infer(OpKind::kMatMul, {std::nullopt, SymShape{4, 16}});
  ASSERT_TRUE(unknown_rank.status.ok());
  EXPECT_FALSE(unknown_rank.shape.has_value());

  auto conv = infer(OpKind::kConv, {SymShape{batch, 4, Dim(), 32}, SymShape{8, 4, 3, 3}},
                    attrs({{"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}}));
  ASSERT_TRUE(conv.status.ok()) << conv.status.message();
  ASSERT_EQ(conv.shape->size(), 4u);
  EXPECT_EQ((*conv.shape)[0], batch);
  EXPECT_EQ((*conv.shape)[1].value, 8);
  EXPECT_FALSE((*conv.shape)[2].known());
  EXPECT_EQ((*conv.shape)[3].value, 16);
  auto conv_unknown_w = infer(OpKind::kConv, {SymShape{1, 4, 9, 9}, SymShape{8, 4, Dim(), Dim()}});
  ASSERT_TRUE(conv_unknown_w.status.ok()) << conv_unknown_w.status.message();
  EXPECT_FALSE((*conv_unknown_w.shape)[2].known());

  auto deconv = infer(OpKind::kConvTranspose, {SymShape{batch, 4, 16, 16}, SymShape{4, 2, 4, 4}},
                      attrs({{"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}}));
  ASSERT_TRUE(deconv.status.ok()) << deconv.status.message();
  EXPECT_EQ(*deconv.shape, (SymShape{batch, 2, 32, 32}));

  auto einsum = infer(OpKind::kEinsum, {SymShape{batch, 8, Dim(), 64}, SymShape{batch, 8, 77, 64}},
                      attrs({{"equation", s("bhid,bhjd->bhij")}}));
  ASSERT_TRUE(einsum.status.ok()) << einsum.status.message();
  EXPECT_EQ(einsum.shape->size(), 4u);
  EXPECT_EQ((*einsum.shape)[3].value, 77);

  auto gemm = infer(OpKind::kGemm, {SymShape{batch, 32}, SymShape{48, 32}, SymShape{48}},
                    attrs({{"transB", i(1)}}));
  ASSERT_TRUE(gemm.status.ok()) << gemm.status.message();
  EXPECT_EQ(*gemm.shape, (SymShape{batch, 48}));
}

}  // namespace
}  // namespace kiln::testing
