// Winograd F(2x2, 3x3) and F(4x4, 3x3) convolutions (kernels/cpu/winograd.h):
// the kernel against a direct convolution summed in double, on every SIMD
// target; then
// as the Conv kernel runs it (marked by the winograd_conv pass) against the
// reference Conv.
#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/winograd.h"
#include "op_test_util.h"
#include "passes/pass.h"

namespace kiln {
namespace {

using testing::f32;

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// y = conv(x, w) + bias (+ residual), summed in double.
std::vector<double> direct(const winograd::Conv& c, const std::vector<float>& x, const std::vector<float>& w,
                           const std::vector<float>& bias, const std::vector<float>* residual) {
  std::vector<double> y(size_t(c.batch * c.out_channels * c.out_height * c.out_width));
  size_t at = 0;
  for (int64_t n = 0; n < c.batch; ++n)
    for (int64_t o = 0; o < c.out_channels; ++o)
      for (int64_t oh = 0; oh < c.out_height; ++oh)
        for (int64_t ow = 0; ow < c.out_width; ++ow, ++at) {
          double sum = bias[size_t(o)] + (residual ? (*residual)[at] : 0.0);
          for (int64_t i = 0; i < c.in_channels; ++i)
            for (int64_t r = 0; r < 3; ++r)
              for (int64_t s = 0; s < 3; ++s) {
                const int64_t ih = oh - c.pad_h + r, iw = ow - c.pad_w + s;
                if (ih < 0 || ih >= c.height || iw < 0 || iw >= c.width) continue;
                sum += double(x[size_t(((n * c.in_channels + i) * c.height + ih) * c.width + iw)]) *
                       w[size_t(((o * c.in_channels + i) * 3 + r) * 3 + s)];
              }
          y[at] = sum;
        }
  return y;
}

struct Case {
  const char* label;
  winograd::Conv conv;
  bool residual, in_place;  // in_place: the residual is y itself
};

TEST(Winograd, MatchesDirectConvolution) {
  const Case cases[] = {
      // Whole runs of tiles, pad 1 (SD's convs, small).
      {"32x32 pad 1", {1, 8, 32, 32, 6, 32, 32, 1, 1}, false, false},
      // Odd output sizes (a last tile cut in half both ways), asymmetric
      // padding, rows of tiles shorter than a vector, two chunks an image.
      {"odd, two images", {2, 5, 23, 25, 7, 23, 24, 1, 0}, true, false},
      {"no padding", {1, 3, 12, 40, 4, 10, 38, 0, 0}, true, true},
      {"pad 2, wide", {1, 4, 6, 70, 3, 8, 72, 2, 2}, false, false},
      // Whole runs of F(4x4) tiles (64 outputs) with a residual, a cut last row.
      {"wide, residual", {1, 4, 9, 140, 3, 9, 140, 1, 1}, true, false},
      // More input channels than a vector's lanes, and a part vector: the
      // filter transform's whole and cut runs.
      {"37 channels", {1, 37, 10, 12, 5, 10, 12, 1, 1}, false, false},
  };
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    for (const Case& k : cases)
      for (int64_t tile : {2, 4})
        for (int threads : {1, 2}) {
          SCOPED_TRACE(std::string(hwy::TargetName(target)) + ", " + k.label + ", F" + std::to_string(tile) +
                       ", threads " + std::to_string(threads));
          winograd::Conv c = k.conv;
          c.tile = tile;
          const auto x = random_floats(size_t(c.batch * c.in_channels * c.height * c.width), 1);
          const auto w = random_floats(size_t(c.out_channels * c.in_channels * 9), 2);
          const auto bias = random_floats(size_t(c.out_channels), 3);
          const size_t out = size_t(c.batch * c.out_channels * c.out_height * c.out_width);
          const auto residual = random_floats(out, 4);
          const std::vector<double> want = direct(c, x, w, bias, k.residual ? &residual : nullptr);
          std::vector<float> y(out, NAN);
          if (k.in_place) y = residual;
          std::vector<char> scratch(winograd::scratch_bytes(c, threads, false) + 64);
          void* aligned = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(scratch.data()) + 63) / 64 * 64);
          std::vector<float> u(winograd::filter_count(c, false));
          winograd::transform_filters(c, w.data(), u.data(), threads);
          winograd::convolve(c, x.data(), u.data(), bias.data(),
                             k.residual ? (k.in_place ? y.data() : residual.data()) : nullptr, y.data(), aligned,
                             threads);
          double worst = 0;
          for (size_t i = 0; i < out; ++i) worst = std::max(worst, std::abs(y[i] - want[i]));
          // F(4x4, 3x3)'s transforms (entries to 8 and 1/24) cost about 4 bits.
          EXPECT_LT(worst, tile == 2 ? 2e-5 : 2e-4) << "largest difference";
        }
  }
  hwy::SetSupportedTargetsForTest(0);
}

// Only convolutions with enough channels and tiles go to Winograd (more
// tiles when each call transforms the filters); F(4x4, 3x3) where its tiles
// fill the GEMM panels, the filters are kept and the products are f32; and
// a tile's U larger than the weight only where each extra byte saves enough.
TEST(Winograd, BestTile) {
  const winograd::Conv vae{1, 512, 64, 64, 512, 64, 64, 1, 1}, vae_32{1, 512, 32, 32, 512, 32, 32, 1, 1};
  const winograd::Conv unet_32{2, 320, 32, 32, 320, 32, 32, 1, 1}, unet_16{2, 640, 16, 16, 640, 16, 16, 1, 1};
  const winograd::Conv unet_8{2, 1280, 8, 8, 1280, 8, 8, 1, 1}, unet_8_one{1, 1280, 8, 8, 1280, 8, 8, 1, 1};
  const winograd::Conv conv_in{1, 4, 64, 64, 512, 64, 64, 1, 1};
  EXPECT_EQ(winograd::best_tile(vae, true, false), 4);
  EXPECT_EQ(winograd::best_tile(vae, false, false), 2);  // filters transformed each call
  EXPECT_EQ(winograd::best_tile(vae, true, true), 2);    // bf16 products
  EXPECT_EQ(winograd::best_tile(vae_32, true, false), 2);  // 1024 outputs: too few for F(4x4)'s U
  EXPECT_EQ(winograd::best_tile(unet_32, true, false), 4);
  EXPECT_EQ(winograd::best_tile(unet_16, true, false), 2);
  EXPECT_EQ(winograd::best_tile(unet_16, false, false), 0);  // 128 tiles, eager
  EXPECT_EQ(winograd::best_tile(unet_8, true, false), 0);    // 128 outputs: too few for F(2x2)'s f32 U
  EXPECT_EQ(winograd::best_tile(unet_8, true, true), 2);     // its bf16 U is smaller than the weight
  EXPECT_EQ(winograd::best_tile(unet_8_one, true, true), 0);  // 16 tiles: half a GEMM panel
  EXPECT_EQ(winograd::best_tile(conv_in, true, false), 0);    // 4 input channels
}

// The Conv kernel on a convolution the winograd_conv pass marks, eagerly
// (the attribute given: 1, the kernel picks F(2x2, 3x3) here; 4, F(4x4,
// 3x3) named) and in a plan (the pass sets it; F(4x4, 3x3) picked): against
// the reference Conv, with odd sizes and asymmetric padding.
TEST(Winograd, ConvKernel) {
  Attributes marked;
  marked.set("pads", std::vector<int64_t>{1, 0, 2, 1});
  marked.set("winograd", int64_t(1));
  const testing::OpCase c{"3x3, 2 images, 31x33 outputs", OpKind::kConv, marked,
                          {f32({2, 40, 30, 34}), f32({36, 40, 3, 3}), f32({36})}, 1, 1e-4};
  const winograd::Conv conv{2, 40, 30, 34, 36, 31, 33, 1, 0};
  ASSERT_EQ(winograd::best_tile(conv, false, false), 2);
  ASSERT_EQ(winograd::best_tile(conv, true, false), 4);
  EXPECT_TRUE(testing::check_op(c));
  testing::OpCase named = c;
  named.attrs.set("winograd", int64_t(4));
  EXPECT_TRUE(testing::check_op(named));
  testing::OpCase unmarked = c;
  unmarked.attrs.set("winograd", int64_t(0));  // the plan's pass marks it again
  EXPECT_TRUE(testing::check_op_in_plan(unmarked));
}

// The pass marks 3x3 convolutions with stride 1 and one group only.
TEST(Winograd, PassMarksOnlyEligibleConvolutions) {
  Graph g;
  g.opset = 18;
  Value* x = g.add_input("x", DType::kF32, sym_shape_from({1, 8, 16, 16}));
  auto weight = [&](const char* name, Shape s) { return g.add_constant(name, *Tensor::empty(DType::kF32, s)); };
  Attributes strided;
  strided.set("strides", std::vector<int64_t>{2, 2});
  Attributes grouped;
  grouped.set("group", int64_t(2));
  Value *a = g.add_value("a"), *b = g.add_value("b"), *c = g.add_value("c"), *d = g.add_value("d");
  Node* eligible = g.add_node(OpKind::kConv, "eligible", {x, weight("w0", {8, 8, 3, 3})}, {a});
  Node* one_by_one = g.add_node(OpKind::kConv, "1x1", {x, weight("w1", {8, 8, 1, 1})}, {b});
  Node* with_stride = g.add_node(OpKind::kConv, "strided", {x, weight("w2", {8, 8, 3, 3})}, {c}, strided);
  Node* with_groups = g.add_node(OpKind::kConv, "grouped", {x, weight("w3", {8, 4, 3, 3})}, {d}, grouped);
  for (Value* v : {a, b, c, d}) g.mark_output(v);
  PassStats stats;
  ASSERT_TRUE(winograd_conv(g, &stats).ok());
  EXPECT_EQ(eligible->attrs.get_int("winograd", 0), 1);
  for (const Node* n : {one_by_one, with_stride, with_groups}) EXPECT_EQ(n->attrs.get_int("winograd", 0), 0) << n->name;
  EXPECT_EQ(stats.counts["winograd_conv"], 1);
}

}  // namespace
}  // namespace kiln
