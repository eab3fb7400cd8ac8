// One 3x3 convolution (pad 1, stride 1, with bias) at the shapes of SD's VAE
// decoder and UNet, direct and by Winograd's F(2x2, 3x3) and F(4x4, 3x3)
// (the conv's winograd attribute 0, 2 and 4), in f32 and, on CPUs with
// AVX512-BF16, in bf16 (on kiln's bf16 GEMM: direct, the input patches
// packed into bf16 panels; Winograd, the transformed tiles): each compiled
// into a plan, runs interleaved so drift on a shared machine hits all alike.
// Medians; the tile winograd::best_tile picks for each; and each output's
// largest difference from the f32 direct one, relative to that output's
// largest magnitude.
//
//   build/bench/kiln_bench_conv [--iters 7]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/winograd.h"
#include "runtime/plan.h"

namespace kiln {
namespace {

struct Shape4 {
  const char* where;
  int64_t batch, in_channels, out_channels, size;
};

// SD 1.5's VAE decoder at 256x256 (its levels 32 to 256 pixels wide), then
// its UNet at 32x32 latents (CFG batch 2).
const Shape4 kShapes[] = {
    {"VAE mid", 1, 512, 512, 32},    {"VAE up 64", 1, 512, 512, 64},  {"VAE up 128", 1, 512, 512, 128},
    {"VAE up 256", 1, 256, 256, 256}, {"VAE last", 1, 128, 128, 256}, {"UNet 32", 2, 320, 320, 32},
    {"UNet 32 in", 2, 640, 320, 32},  {"UNet 16", 2, 640, 640, 16},  {"UNet 16 in", 2, 320, 640, 16},
    {"UNet 8", 2, 1280, 1280, 8},     {"UNet 8 in", 2, 640, 1280, 8}, {"UNet 8 cat", 2, 2560, 1280, 8},
};

// The conv with attribute winograd = `tile` (0: direct).
Graph conv_graph(const Shape4& s, int64_t tile, std::mt19937& rng) {
  Graph g;
  g.opset = 18;
  Value* x = g.add_input("x", DType::kF32, sym_shape_from({s.batch, s.in_channels, s.size, s.size}));
  Tensor w = *Tensor::empty(DType::kF32, {s.out_channels, s.in_channels, 3, 3});
  Tensor b = *Tensor::empty(DType::kF32, {s.out_channels});
  std::normal_distribution<float> dist(0.0f, 0.05f);
  for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = dist(rng);
  for (int64_t i = 0; i < b.numel(); ++i) b.data<float>()[i] = dist(rng);
  Attributes a;
  a.set("pads", std::vector<int64_t>{1, 1, 1, 1});
  a.set("winograd", tile);
  Value* y = g.add_value("y");
  g.add_node(OpKind::kConv, "conv", {x, g.add_constant("w", std::move(w)), g.add_constant("b", std::move(b))}, {y},
             a);
  g.mark_output(y);
  return g;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

int run(int argc, char** argv) {
  int iters = 7;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--iters" && i + 1 < argc) {
      iters = std::atoi(argv[i + 1]);
    } else {
      fmt::print(stderr, "usage: kiln_bench_conv [--iters N]\n");
      return 2;
    }
  }
  fmt::print("3x3 conv, pad 1, bias; median ms of {} runs each, interleaved; F2, F4: Winograd's F(2x2, 3x3) "
             "and F(4x4, 3x3); diff: the largest from f32 direct, relative\n",
             iters);
  // f32 direct, F2, F4, then (with bf16 products; else bf16 convs stay on
  // oneDNN whatever the attribute says) the same in bf16.
  const bool bf16 = gemm::has_bf16_products();
  const int64_t tiles[] = {0, 2, 4};
  const int variants = bf16 ? 6 : 3;
  fmt::print("{:<11} {:>18} {:>7} {:>7} {:>7} {:>6} {:>8} {:>8}", "where", "N x IC>OC x HW", "f32", "F2", "F4",
             "picks", "F2 diff", "F4 diff");
  if (bf16) fmt::print(" {:>7} {:>7} {:>7} {:>6} {:>8} {:>8}", "bf16", "F2", "F4", "picks", "F2 diff", "F4 diff");
  fmt::print("\n");
  for (const Shape4& s : kShapes) {
    std::mt19937 rng(1);
    Tensor x = *Tensor::empty(DType::kF32, {s.batch, s.in_channels, s.size, s.size});
    std::normal_distribution<float> dist;
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = dist(rng);
    std::vector<std::unique_ptr<Plan>> plans;
    for (int k = 0; k < variants; ++k) {
      std::mt19937 weights(2);  // the same weights in each
      PassOptions passes;
      passes.disabled = {"winograd_conv"};  // the attribute decides
      if (k >= 3) passes.precision.compute = DType::kBF16;
      auto plan = Plan::compile(conv_graph(s, tiles[k % 3], weights), {.passes = passes});
      if (!plan.ok() || !(*plan)->bind_input("x", x.view()).ok()) {
        fmt::print(stderr, "{}: compile or bind failed\n", s.where);
        return 1;
      }
      plans.push_back(std::move(*plan));
    }
    std::vector<std::vector<double>> ms(plans.size());
    std::vector<std::vector<float>> out(plans.size());
    for (int i = -1; i < iters; ++i)  // one untimed round: each plan records its steps
      for (int k = 0; k < variants; ++k) {
        const auto start = std::chrono::steady_clock::now();
        if (Status st = plans[size_t(k)]->run(); !st.ok()) {
          fmt::print(stderr, "{}\n", st.message());
          return 1;
        }
        const double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
        if (i >= 0) ms[size_t(k)].push_back(t);
        if (i == -1) {
          const TensorView& y = plans[size_t(k)]->output(0);
          out[size_t(k)].assign(y.as<float>(), y.as<float>() + y.numel());
        }
      }
    float largest = 0;
    for (float v : out[0]) largest = std::max(largest, std::abs(v));
    auto diff = [&](int k) {
      float worst = 0;
      for (size_t i = 0; i < out[0].size(); ++i) worst = std::max(worst, std::abs(out[0][i] - out[size_t(k)][i]));
      return worst / largest;
    };
    auto picks = [&](bool in_bf16) {
      const int64_t tile = winograd::best_tile(
          {s.batch, s.in_channels, s.size, s.size, s.out_channels, s.size, s.size, 1, 1}, true, in_bf16);
      return tile ? fmt::format("F{}", tile) : std::string("direct");
    };
    fmt::print("{:<11} {:>18} {:>7.2f} {:>7.2f} {:>7.2f} {:>6} {:>8.1e} {:>8.1e}", s.where,
               fmt::format("{} x {}>{} x {}", s.batch, s.in_channels, s.out_channels, s.size), median(ms[0]),
               median(ms[1]), median(ms[2]), picks(false), diff(1), diff(2));
    if (bf16)
      fmt::print(" {:>7.2f} {:>7.2f} {:>7.2f} {:>6} {:>8.1e} {:>8.1e}", median(ms[3]), median(ms[4]), median(ms[5]),
                 picks(true), diff(4), diff(5));
    fmt::print("\n");
  }
  return 0;
}

}  // namespace
}  // namespace kiln

int main(int argc, char** argv) { return kiln::run(argc, argv); }
