// kiln.Attention alone against the unfused MatMul - Softmax - MatMul it
// replaces, in f32 and bf16, at 256 to 4096 tokens: each variant compiled
// into a plan, runs interleaved (fused f32, unfused f32, fused bf16, unfused
// bf16, fused f32, ...) so drift on a shared machine hits all alike; medians.
//
//   build/bench/kiln_bench_attention [--tokens 256,1024,4096] [--heads 8] [--head-dim 64] [--iters 5]
//                                    [--layout heads-first|tokens-first]
//
// heads-first (the default): q and v [1, H, S, D], k [1, H, D, S], each
// head's rows contiguous. tokens-first: q, k, v and y [1, S, H, D], as a
// model's projections leave them (each token's heads side by side, a head's
// rows H * D floats apart); the fused op reads them through its perms, the
// unfused graph transposes them as exported models do.
//
// The unfused graph's scores are a [heads, S, S] f32 tensor in the arena
// (512 MiB at 4096 tokens and 8 heads); the fused kernel never writes them.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "runtime/plan.h"

namespace kiln {
namespace {

struct Variant {
  std::string name;
  bool fused;
  bool bf16;
  std::unique_ptr<Plan> plan;
  std::vector<double> ms;
};

// The inputs' shapes for a layout (see the top of the file): q, k, v.
std::array<Shape, 3> input_shapes(bool tokens_first, int64_t heads, int64_t tokens, int64_t dim) {
  if (tokens_first) return {Shape{1, tokens, heads, dim}, Shape{1, tokens, heads, dim}, Shape{1, tokens, heads, dim}};
  return {Shape{1, heads, tokens, dim}, Shape{1, heads, dim, tokens}, Shape{1, heads, tokens, dim}};
}

// q, k, v -> attention, fused (one kiln.Attention) or as MatMul, Mul by the
// scale, Softmax, MatMul (tokens-first: with Transposes around them).
Graph attention_graph(int64_t heads, int64_t tokens, int64_t dim, bool fused, bool tokens_first) {
  using Ints = std::vector<int64_t>;
  Graph g;
  g.opset = 18;
  const auto shapes = input_shapes(tokens_first, heads, tokens, dim);
  Value* q = g.add_input("q", DType::kF32, sym_shape_from(shapes[0]));
  Value* k = g.add_input("k", DType::kF32, sym_shape_from(shapes[1]));
  Value* v = g.add_input("v", DType::kF32, sym_shape_from(shapes[2]));
  Value* y = g.add_value("y");
  const float scale = 1.0f / std::sqrt(float(dim));
  auto transpose = [&](Value* x, const std::string& name, Ints perm, Value* to = nullptr) {
    Attributes a;
    a.set("perm", std::move(perm));
    if (!to) to = g.add_value(name);
    g.add_node(OpKind::kTranspose, name, {x}, {to}, a);
    return to;
  };
  if (fused) {
    Attributes a;
    a.set("scale", scale);
    if (tokens_first) {
      a.set("q_perm", Ints{0, 2, 1, 3});
      a.set("k_perm", Ints{0, 2, 3, 1});
      a.set("v_perm", Ints{0, 2, 1, 3});
      a.set("out_perm", Ints{0, 2, 1, 3});
    }
    g.add_node(OpKind::kAttention, "attention", {q, k, v}, {y}, a);
  } else {
    Value* out = y;
    if (tokens_first) {
      q = transpose(q, "q_heads", {0, 2, 1, 3});
      k = transpose(k, "k_heads", {0, 2, 3, 1});
      v = transpose(v, "v_heads", {0, 2, 1, 3});
      out = g.add_value("y_heads");
    }
    Value* scores = g.add_value("scores");
    Value* scaled = g.add_value("scaled");
    Value* probs = g.add_value("probs");
    Tensor s = *Tensor::empty(DType::kF32, {});
    s.data<float>()[0] = scale;
    Attributes axis;
    axis.set("axis", int64_t(-1));
    g.add_node(OpKind::kMatMul, "scores", {q, k}, {scores});
    g.add_node(OpKind::kMul, "scale", {scores, g.add_constant("scale_value", std::move(s))}, {scaled});
    g.add_node(OpKind::kSoftmax, "softmax", {scaled}, {probs}, axis);
    g.add_node(OpKind::kMatMul, "values", {probs, v}, {out});
    if (tokens_first) transpose(out, "y_tokens", {0, 2, 1, 3}, y);
  }
  g.mark_output(y);
  return g;
}

Tensor random_tensor(Shape shape, std::mt19937& rng) {
  Tensor t = *Tensor::empty(DType::kF32, shape);
  std::normal_distribution<float> dist;
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

int run(int argc, char** argv) {
  std::vector<int64_t> token_counts = {256, 1024, 4096};
  int64_t heads = 8, dim = 64;
  int iters = 5;
  bool tokens_first = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--tokens") {
      token_counts.clear();
      for (size_t start = 0; start < value.size();) {
        size_t comma = value.find(',', start);
        if (comma == std::string::npos) comma = value.size();
        token_counts.push_back(std::atoll(value.substr(start, comma - start).c_str()));
        start = comma + 1;
      }
    } else if (flag == "--heads") {
      heads = std::atoll(value.c_str());
    } else if (flag == "--head-dim") {
      dim = std::atoll(value.c_str());
    } else if (flag == "--iters") {
      iters = std::atoi(value.c_str());
    } else if (flag == "--layout") {
      if (value != "heads-first" && value != "tokens-first") {
        fmt::print(stderr, "--layout takes heads-first or tokens-first, not {}\n", value);
        return 2;
      }
      tokens_first = value == "tokens-first";
    } else {
      fmt::print(stderr, "unknown flag {}\n", flag);
      return 2;
    }
  }
  fmt::print("attention, {} heads x {} dims, batch 1, {}; median of {} runs each, interleaved\n", heads, dim,
             tokens_first ? "tokens first" : "heads first", iters);
  fmt::print("{:>7} {:>5} {:>12} {:>12} {:>10} {:>10} {:>8}\n", "tokens", "dtype", "fused ms", "unfused ms", "fused GF/s",
             "unfused", "speedup");
  for (int64_t tokens : token_counts) {
    std::mt19937 rng(1);
    const auto shapes = input_shapes(tokens_first, heads, tokens, dim);
    const Tensor q = random_tensor(shapes[0], rng), k = random_tensor(shapes[1], rng), v = random_tensor(shapes[2], rng);
    std::vector<Variant> variants;
    for (bool bf16 : {false, true})
      for (bool fused : {true, false}) {
        PassOptions passes;
        passes.disabled = {"fuse_attention"};  // the unfused graph stays unfused
        if (bf16) passes.precision.compute = DType::kBF16;
        auto plan = Plan::compile(attention_graph(heads, tokens, dim, fused, tokens_first), {.passes = passes});
        if (!plan.ok()) {
          fmt::print(stderr, "{}\n", plan.status().message());
          return 1;
        }
        for (const auto& [name, t] : {std::pair{"q", &q}, {"k", &k}, {"v", &v}})
          if (Status s = (*plan)->bind_input(name, t->view()); !s.ok()) return 1;
        variants.push_back({fused ? "fused" : "unfused", fused, bf16, std::move(*plan), {}});
      }
    for (int i = -1; i < iters; ++i)  // one untimed round: each plan records its steps
      for (Variant& var : variants) {
        const auto start = std::chrono::steady_clock::now();
        if (Status s = var.plan->run(); !s.ok()) {
          fmt::print(stderr, "{}\n", s.message());
          return 1;
        }
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
        if (i >= 0) var.ms.push_back(ms);
      }
    const double flops = 4.0 * double(heads) * double(tokens) * double(tokens) * double(dim);
    for (int d = 0; d < 2; ++d) {
      const double fused = median(variants[size_t(2 * d)].ms), unfused = median(variants[size_t(2 * d + 1)].ms);
      fmt::print("{:>7} {:>5} {:>12.3f} {:>12.3f} {:>10.1f} {:>10.1f} {:>7.2f}x\n", tokens, d ? "bf16" : "f32", fused,
                 unfused, flops / fused / 1e6, flops / unfused / 1e6, unfused / fused);
    }
  }
  return 0;
}

}  // namespace
}  // namespace kiln

int main(int argc, char** argv) { return kiln::run(argc, argv); }
