// The fusion passes: each on a small graph written the way exporters write
// the pattern (before/after ops, outputs with the pass on vs off), and the
// exact fusion counts on the reference models.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "onnx/onnx_import.h"
#include "passes/pass.h"
#include "runtime/eager_executor.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

// Builds graphs tersely: every node makes one fresh value.
class Builder {
 public:
  Value* input(const std::string& name, Shape shape) {
    SymShape s;
    for (int64_t d : shape) s.push_back(Dim(d));
    return g.add_input(name, DType::kF32, s);
  }
  Value* scalar(float v) { return constant(Shape{}, {v}); }
  Value* constant(Shape shape, std::vector<float> values) {
    return g.add_constant(g.unique_name("c"), *Tensor::from_vector<float>(std::move(shape), values));
  }
  Value* ints(std::vector<int64_t> values) {
    const int64_t n = int64_t(values.size());
    return g.add_constant(g.unique_name("i"), *Tensor::from_vector<int64_t>({n}, values));
  }
  Value* node(OpKind op, std::vector<Value*> inputs, Attributes attrs = {}) {
    Value* out = g.add_value(g.unique_name("v"));
    g.add_node(op, g.unique_name(std::string(op_name(op))), std::move(inputs), {out}, std::move(attrs));
    return out;
  }
  Value* transpose(Value* x, std::vector<int64_t> perm) {
    Attributes a;
    a.set("perm", std::move(perm));
    return node(OpKind::kTranspose, {x}, std::move(a));
  }
  Graph g;
};

std::map<OpKind, int> op_counts(const Graph& g) {
  std::map<OpKind, int> counts;
  for (const auto& n : g.nodes()) ++counts[n->op];
  return counts;
}

Tensor random_input(const Value* v, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-3, 3);
  Tensor t = Tensor::empty(v->dtype, *sym_shape_concrete(*v->shape)).value();
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

// Runs `build` twice: once untouched, once through the pipeline with only
// `pass` (and the cleanup passes) on. Returns the fused graph's op counts and
// checks the outputs agree within `tol`.
std::map<OpKind, int> fuse_and_compare(const std::function<void(Builder&)>& build, const std::string& pass,
                                       int64_t want_count, double tol = 1e-5) {
  Builder original, fused;
  build(original);
  build(fused);
  EXPECT_TRUE(graph_infer_shapes(original.g).ok());
  EXPECT_TRUE(graph_infer_shapes(fused.g).ok());
  PassOptions only;
  for (const PassInfo& p : pass_pipeline())
    if (p.name != pass && std::string(p.name) != "eliminate_dead_code" && !std::string(p.name).starts_with("fold"))
      only.disabled.insert(p.name);
  PassStats stats;
  Status s = run_passes(fused.g, only, &stats);
  EXPECT_TRUE(s.ok()) << s.message();
  if (!s.ok()) return {};
  EXPECT_EQ(stats.counts[pass], want_count) << pass;
  NamedTensors inputs;
  uint64_t seed = 1;
  for (const Value* v : original.g.inputs()) inputs.emplace_back(v->name, random_input(v, seed++));
  EagerExecutor a(original.g), b(fused.g);
  auto ya = a.run(inputs);
  auto yb = b.run(inputs);
  EXPECT_TRUE(ya.ok() && yb.ok()) << (ya.ok() ? yb.status().message() : ya.status().message());
  if (ya.ok() && yb.ok())
    for (size_t k = 0; k < ya->size(); ++k) {
      EXPECT_EQ((*ya)[k].shape(), (*yb)[k].shape());
      for (int64_t i = 0; i < (*ya)[k].numel(); ++i)
        if (std::abs((*ya)[k].data<float>()[i] - (*yb)[k].data<float>()[i]) > tol) {
          ADD_FAILURE() << pass << " output " << k << " at " << i << ": " << (*ya)[k].data<float>()[i] << " vs "
                        << (*yb)[k].data<float>()[i];
          break;
        }
    }
  return op_counts(fused.g);
}

TEST(Fusion, GeluExactInEachGrouping) {
  // x/2 (1 + erf(x/sqrt2)) as torch writes it, and regrouped.
  auto erf_plus_one = [](Builder& b, Value* x, bool divide) {
    Value* scaled = divide ? b.node(OpKind::kDiv, {x, b.scalar(1.4142135f)})
                           : b.node(OpKind::kMul, {b.scalar(0.70710678f), x});
    return b.node(OpKind::kAdd, {b.node(OpKind::kErf, {scaled}), b.scalar(1.0f)});
  };
  for (int grouping = 0; grouping < 3; ++grouping) {
    auto counts = fuse_and_compare(
        [&](Builder& b) {
          Value* x = b.input("x", {4, 33});
          Value* u = erf_plus_one(b, x, grouping != 1);
          Value* y = grouping == 0   ? b.node(OpKind::kMul, {b.node(OpKind::kMul, {x, u}), b.scalar(0.5f)})
                     : grouping == 1 ? b.node(OpKind::kMul, {x, b.node(OpKind::kMul, {b.scalar(0.5f), u})})
                                     : b.node(OpKind::kMul, {b.node(OpKind::kMul, {x, b.scalar(0.5f)}), u});
          b.g.mark_output(y);
        },
        "fuse_gelu", 1);
    EXPECT_EQ(counts, (std::map<OpKind, int>{{OpKind::kGelu, 1}})) << "grouping " << grouping;
  }
}

TEST(Fusion, GeluTanhAndQuick) {
  auto counts = fuse_and_compare(
      [](Builder& b) {
        Value* x = b.input("x", {2, 3, 50});
        Value* cube = b.node(OpKind::kMul, {x, b.node(OpKind::kMul, {x, x})});
        Value* inner = b.node(OpKind::kAdd, {x, b.node(OpKind::kMul, {b.scalar(0.044715f), cube})});
        Value* t = b.node(OpKind::kTanh, {b.node(OpKind::kMul, {b.scalar(0.7978845608f), inner})});
        Value* u = b.node(OpKind::kAdd, {b.scalar(1.0f), t});
        b.g.mark_output(b.node(OpKind::kMul, {b.scalar(0.5f), b.node(OpKind::kMul, {x, u})}));
        // CLIP's QuickGELU on another branch.
        Value* q = b.node(OpKind::kMul, {x, b.node(OpKind::kSigmoid, {b.node(OpKind::kMul, {x, b.scalar(1.702f)})})});
        b.g.mark_output(q);
      },
      "fuse_gelu", 2);
  EXPECT_EQ(counts, (std::map<OpKind, int>{{OpKind::kGelu, 2}}));
}

TEST(Fusion, GeluLeavesLookalikesAlone) {
  // 0.4 is not GELU's 1/2; and the erf result is also read elsewhere.
  auto counts = fuse_and_compare(
      [](Builder& b) {
        Value* x = b.input("x", {8});
        Value* e = b.node(OpKind::kErf, {b.node(OpKind::kDiv, {x, b.scalar(1.4142135f)})});
        Value* u = b.node(OpKind::kAdd, {e, b.scalar(1.0f)});
        b.g.mark_output(b.node(OpKind::kMul, {b.node(OpKind::kMul, {x, u}), b.scalar(0.4f)}));
        Value* x2 = b.input("x2", {8});
        Value* e2 = b.node(OpKind::kErf, {b.node(OpKind::kDiv, {x2, b.scalar(1.4142135f)})});
        Value* u2 = b.node(OpKind::kAdd, {e2, b.scalar(1.0f)});
        b.g.mark_output(b.node(OpKind::kMul, {b.node(OpKind::kMul, {x2, u2}), b.scalar(0.5f)}));
        b.g.mark_output(e2);
      },
      "fuse_gelu", 0);
  EXPECT_EQ(counts[OpKind::kGelu], 0);
}

TEST(Fusion, Silu) {
  auto counts = fuse_and_compare(
      [](Builder& b) {
        Value* x = b.input("x", {2, 16, 5});
        b.g.mark_output(b.node(OpKind::kMul, {b.node(OpKind::kSigmoid, {x}), x}));
        Value* swish = b.node(OpKind::kMul, {x, b.node(OpKind::kSigmoid, {b.node(OpKind::kMul, {b.scalar(2.0f), x})})});
        b.g.mark_output(swish);
      },
      "fuse_silu", 2);
  EXPECT_EQ(counts, (std::map<OpKind, int>{{OpKind::kSilu, 2}}));
}

// torch's GroupNorm export: Reshape [N, G, -1], InstanceNormalization with
// unit scale and zero bias, Reshape back, affine over [C, 1, 1].
Value* exported_group_norm(Builder& b, Value* x, int64_t groups, int64_t channels, bool affine) {
  Value* r = b.node(OpKind::kReshape, {x, b.ints({0, groups, -1})});
  Attributes eps;
  eps.set("epsilon", 1e-5f);
  Value* n = b.node(OpKind::kInstanceNormalization,
                    {r, b.constant({groups}, std::vector<float>(size_t(groups), 1.0f)),
                     b.constant({groups}, std::vector<float>(size_t(groups), 0.0f))},
                    eps);
  Value* y = b.node(OpKind::kReshape, {n, b.node(OpKind::kShape, {x})});
  if (!affine) return y;
  std::vector<float> gamma, beta;
  for (int64_t c = 0; c < channels; ++c) gamma.push_back(0.5f + 0.1f * float(c)), beta.push_back(0.2f * float(c) - 1);
  y = b.node(OpKind::kMul, {y, b.constant({channels, 1, 1}, gamma)});
  return b.node(OpKind::kAdd, {y, b.constant({channels, 1, 1}, beta)});
}

TEST(Fusion, GroupNormWithAndWithoutSilu) {
  auto build = [](Builder& b) {
    Value* x = b.input("x", {2, 8, 5, 6});
    Value* gn = exported_group_norm(b, x, 4, 8, true);
    b.g.mark_output(b.node(OpKind::kMul, {gn, b.node(OpKind::kSigmoid, {gn})}));  // then SiLU
    Value* plain = exported_group_norm(b, b.input("z", {1, 8, 3, 3}), 2, 8, false);
    b.g.mark_output(plain);
  };
  // fuse_silu runs first in the pipeline, so GroupNorm can absorb its SiLU.
  Builder original, fused;
  build(original);
  build(fused);
  ASSERT_TRUE(graph_infer_shapes(original.g).ok() && graph_infer_shapes(fused.g).ok());
  PassStats stats;
  ASSERT_TRUE(fold_constants(fused.g, &stats).ok());
  ASSERT_TRUE(fuse_silu(fused.g, &stats).ok());
  ASSERT_TRUE(fuse_group_norm(fused.g, &stats).ok());
  ASSERT_TRUE(eliminate_dead_code(fused.g, &stats).ok());
  EXPECT_EQ(stats.counts["fuse_group_norm"], 2);
  EXPECT_EQ(stats.counts["fuse_group_norm_with_silu"], 1);
  EXPECT_EQ(op_counts(fused.g), (std::map<OpKind, int>{{OpKind::kGroupNorm, 2}}));
  NamedTensors inputs = {{"x", random_input(original.g.inputs()[0], 7)}, {"z", random_input(original.g.inputs()[1], 8)}};
  auto ya = EagerExecutor(original.g).run(inputs);
  auto yb = EagerExecutor(fused.g).run(inputs);
  ASSERT_TRUE(ya.ok() && yb.ok());
  for (size_t k = 0; k < 2; ++k)
    for (int64_t i = 0; i < (*ya)[k].numel(); ++i)
      ASSERT_NEAR((*ya)[k].data<float>()[i], (*yb)[k].data<float>()[i], 1e-5) << k << " " << i;
}

// Attention as exported from a [B, S, H*D] projection: head split by
// Reshape + Transpose, Q Kᵀ scaled, a mask added, Softmax, P V, heads merged.
void exported_attention(Builder& b, bool mask) {
  const int64_t B = 2, S = 12, H = 3, D = 8;
  auto heads = [&](const char* name, std::vector<int64_t> perm) {
    return b.transpose(b.node(OpKind::kReshape, {b.input(name, {B, S, H * D}), b.ints({B, S, H, D})}), perm);
  };
  Value* q = heads("query", {0, 2, 1, 3});
  Value* kt = heads("key", {0, 2, 3, 1});
  Value* v = heads("value", {0, 2, 1, 3});
  Value* s = b.node(OpKind::kMul, {b.node(OpKind::kMatMul, {q, kt}), b.scalar(0.35355339f)});
  if (mask) {
    std::vector<float> causal;
    for (int64_t i = 0; i < S; ++i)
      for (int64_t j = 0; j < S; ++j) causal.push_back(j > i ? -1e9f : 0.0f);
    s = b.node(OpKind::kAdd, {s, b.constant({S, S}, causal)});
  }
  Attributes last;
  last.set("axis", int64_t(-1));
  Value* o = b.node(OpKind::kMatMul, {b.node(OpKind::kSoftmax, {s}, last), v});
  b.g.mark_output(b.node(OpKind::kReshape, {b.transpose(o, {0, 2, 1, 3}), b.ints({B, S, H * D})}));
}

TEST(Fusion, AttentionWithHeadSplitAndMerge) {
  for (bool mask : {false, true}) {
    auto counts = fuse_and_compare([&](Builder& b) { exported_attention(b, mask); }, "fuse_attention", 1);
    // Only the head-split Reshapes (views) and the final merge remain.
    EXPECT_EQ(counts, (std::map<OpKind, int>{{OpKind::kAttention, 1}, {OpKind::kReshape, 4}})) << mask;
  }
}

// An attention's Q, K and V as fuse_attention and fuse_linear leave them:
// each a kiln.Linear (with its bias) or a MatMul by a constant weight, of x
// (K and V of a context for cross-attention), split into heads by a Reshape.
// With `odd_one_out`, V's projection has an activation (so it cannot merge);
// with `checkpoint_layout`, the Linears' weights are [N, K] in f16 (transB,
// as checkpoints store them) and they have no bias.
void projected_attention(Builder& b, OpKind projection, bool cross, bool odd_one_out = false, int64_t seq = 12,
                         bool checkpoint_layout = false) {
  const int64_t B = 2, C = 16, H = 2, D = 8, context_seq = cross ? 7 : seq;
  Value* x = b.input("x", {B, seq, C});
  Value* context = cross ? b.input("context", {B, context_seq, C}) : x;
  auto heads = [&](Value* from, int64_t rows, int seed, bool activation) {
    std::vector<float> w(size_t(C * H * D)), bias(size_t(H * D));
    for (size_t i = 0; i < w.size(); ++i) w[i] = float(int(i * 7 + size_t(seed) * 13) % 17 - 8) * 0.05f;
    for (size_t i = 0; i < bias.size(); ++i) bias[i] = 0.1f * float(seed) - 0.02f * float(i);
    Value* weight = b.constant({C, H * D}, w);
    Attributes a;
    a.set("activation", std::string(activation ? "gelu" : "none"));
    if (checkpoint_layout) {
      Tensor t = *Tensor::empty(DType::kF16, {H * D, C});
      for (int64_t n = 0; n < H * D; ++n)
        for (int64_t k = 0; k < C; ++k) t.data<f16>()[n * C + k] = f32_to_f16(w[size_t(k * H * D + n)]);
      a.set("transB", int64_t(1));
      return b.node(OpKind::kReshape, {b.node(OpKind::kLinear, {from, b.g.add_constant(b.g.unique_name("w16"), t)}, a),
                                       b.ints({B, rows, H, D})});
    }
    Value* y = projection == OpKind::kLinear ? b.node(OpKind::kLinear, {from, weight, b.constant({H * D}, bias)}, a)
                                             : b.node(OpKind::kMatMul, {from, weight});
    return b.node(OpKind::kReshape, {y, b.ints({B, rows, H, D})});
  };
  Attributes a;
  a.set("scale", 0.35355339f);
  a.set("q_perm", std::vector<int64_t>{0, 2, 1, 3});
  a.set("k_perm", std::vector<int64_t>{0, 2, 3, 1});
  a.set("v_perm", std::vector<int64_t>{0, 2, 1, 3});
  a.set("out_perm", std::vector<int64_t>{0, 2, 1, 3});
  Value* q = heads(x, seq, 1, false);
  Value* k = heads(context, context_seq, 2, false);
  Value* v = heads(context, context_seq, 3, odd_one_out);
  b.g.mark_output(b.node(OpKind::kAttention, {q, k, v}, a));
}

TEST(Fusion, QkvProjectionsOfOneTensor) {
  using Counts = std::map<OpKind, int>;
  // Self-attention: Q, K and V from one GEMM, its heads read as three slices.
  auto counts = fuse_and_compare([](Builder& b) { projected_attention(b, OpKind::kLinear, false); }, "fuse_qkv", 1);
  EXPECT_EQ(counts, (Counts{{OpKind::kLinear, 1}, {OpKind::kReshape, 1}, {OpKind::kAttention, 1}}));
  counts = fuse_and_compare([](Builder& b) { projected_attention(b, OpKind::kMatMul, false); }, "fuse_qkv", 1);
  EXPECT_EQ(counts, (Counts{{OpKind::kMatMul, 1}, {OpKind::kReshape, 1}, {OpKind::kAttention, 1}}));
  // Cross-attention: K and V (of the context) merge, Q (of x) stays.
  counts = fuse_and_compare([](Builder& b) { projected_attention(b, OpKind::kMatMul, true); }, "fuse_qkv", 1);
  EXPECT_EQ(counts, (Counts{{OpKind::kMatMul, 2}, {OpKind::kReshape, 2}, {OpKind::kAttention, 1}}));
  // A projection with an activation is not a plain one: Q and K merge, V stays.
  counts = fuse_and_compare([](Builder& b) { projected_attention(b, OpKind::kLinear, false, true); }, "fuse_qkv", 1);
  EXPECT_EQ(counts, (Counts{{OpKind::kLinear, 2}, {OpKind::kReshape, 2}, {OpKind::kAttention, 1}}));
  // Weights as checkpoints hold them ([N, K] in f16, no bias): merged as such.
  counts = fuse_and_compare([](Builder& b) { projected_attention(b, OpKind::kLinear, false, false, 12, true); },
                            "fuse_qkv", 1);
  EXPECT_EQ(counts, (Counts{{OpKind::kLinear, 1}, {OpKind::kReshape, 1}, {OpKind::kAttention, 1}}));
  counts = fuse_and_compare([](Builder& b) { projected_attention(b, OpKind::kLinear, true, false, 12, true); },
                            "fuse_qkv", 1);
  EXPECT_EQ(counts, (Counts{{OpKind::kLinear, 2}, {OpKind::kReshape, 2}, {OpKind::kAttention, 1}}));
  // Nothing to merge: cross-attention whose V has an activation.
  counts = fuse_and_compare([](Builder& b) { projected_attention(b, OpKind::kLinear, true, true); }, "fuse_qkv", 0);
  EXPECT_EQ(counts, (Counts{{OpKind::kLinear, 3}, {OpKind::kReshape, 3}, {OpKind::kAttention, 1}}));
}

// fuse_qkv runs after assign_precision: a projection a policy computes in
// another dtype than the rest keeps its own GEMM (here Q in bf16: K and V merge).
TEST(Fusion, QkvProjectionsInDifferentPrecisionsStayApart) {
  Builder b;
  projected_attention(b, OpKind::kLinear, false);
  ASSERT_TRUE(graph_infer_shapes(b.g).ok());
  int projection = 0;
  for (const auto& n : b.g.nodes())
    if (n->op == OpKind::kLinear) n->name = "/attn/" + std::string(1, "qkv"[projection++]);
  PassOptions options;
  options.precision.nodes["/attn/q"] = DType::kBF16;
  PassStats stats;
  ASSERT_TRUE(run_passes(b.g, options, &stats).ok());
  EXPECT_EQ(stats.counts["fuse_qkv"], 1);
  EXPECT_EQ(stats.counts["fuse_qkv_projections"], 2);
  int bf16_linears = 0;
  for (const auto& n : b.g.nodes()) bf16_linears += n->op == OpKind::kLinear && computes_in_bf16(*n);
  EXPECT_EQ(bf16_linears, 1);
  EXPECT_EQ(op_counts(b.g)[OpKind::kLinear], 2);
}

// In bf16, Q, K and V sliced from one merged product give what three
// products give (the same operands rounded alike): 80 tokens, past the 64
// keys from which attention runs in bf16.
TEST(Bf16, QkvSlicesOfOneProductMatchThreeProducts) {
  NamedTensors inputs;
  std::vector<Tensor> outputs[2];
  for (bool merged : {false, true}) {
    Builder b;
    projected_attention(b, OpKind::kLinear, false, false, 80);
    ASSERT_TRUE(graph_infer_shapes(b.g).ok());
    PassOptions options;
    options.precision.compute = DType::kBF16;
    if (!merged) options.disabled.insert("fuse_qkv");
    PassStats stats;
    ASSERT_TRUE(run_passes(b.g, options, &stats).ok());
    EXPECT_EQ(stats.counts["fuse_qkv"], merged ? 1 : 0);
    EXPECT_EQ(stats.counts["assign_precision"], 4);  // the three projections and the attention
    if (inputs.empty()) inputs.emplace_back("x", random_input(b.g.inputs()[0], 3));
    auto y = EagerExecutor(b.g).run(inputs);
    ASSERT_TRUE(y.ok()) << y.status().message();
    outputs[merged] = std::move(*y);
  }
  double worst = 0;
  for (int64_t i = 0; i < outputs[0][0].numel(); ++i)
    worst = std::max(worst, double(std::abs(outputs[0][0].data<float>()[i] - outputs[1][0].data<float>()[i])));
  EXPECT_LT(worst, 1e-5);
}

TEST(Fusion, Geglu) {
  auto counts = fuse_and_compare(
      [](Builder& b) {
        Value* h = b.input("h", {2, 6, 16});
        Value* a = b.node(OpKind::kSlice, {h, b.ints({0}), b.ints({8}), b.ints({-1})});
        Value* g = b.node(OpKind::kSlice, {h, b.ints({8}), b.ints({16}), b.ints({-1})});
        b.g.mark_output(b.node(OpKind::kMul, {a, b.node(OpKind::kGelu, {g})}));
      },
      "fuse_geglu", 1);
  EXPECT_EQ(counts, (std::map<OpKind, int>{{OpKind::kGeglu, 1}}));
}

TEST(Fusion, AdaLayerNorm) {
  auto counts = fuse_and_compare(
      [](Builder& b) {
        Value* x = b.input("x", {2, 7, 16});
        Attributes eps;
        eps.set("epsilon", 1e-6f);
        Value* n = b.node(OpKind::kLayerNormalization,
                          {x, b.constant({16}, std::vector<float>(16, 1.0f)), b.constant({16}, std::vector<float>(16, 0.0f))},
                          eps);
        Value* scale = b.node(OpKind::kAdd, {b.input("scale", {2, 1, 16}), b.scalar(1.0f)});
        b.g.mark_output(b.node(OpKind::kAdd, {b.node(OpKind::kMul, {n, scale}), b.input("shift", {2, 1, 16})}));
      },
      "fuse_adaln", 1);
  EXPECT_EQ(counts, (std::map<OpKind, int>{{OpKind::kModulatedLayerNorm, 1}, {OpKind::kAdd, 1}}));
}

TEST(Fusion, LinearWithActivationAndResidual) {
  auto build = [](Builder& b, bool residual) {
    Value* x = b.input("x", {2, 5, 12});
    std::vector<float> w(12 * 7), bias(7);
    for (size_t i = 0; i < w.size(); ++i) w[i] = float(int(i % 11) - 5) * 0.1f;
    for (size_t i = 0; i < bias.size(); ++i) bias[i] = 0.3f * float(i) - 1;
    Value* y = b.node(OpKind::kAdd, {b.constant({7}, bias), b.node(OpKind::kMatMul, {x, b.constant({12, 7}, w)})});
    Attributes tanh;
    tanh.set("approximate", std::string("tanh"));
    y = b.node(OpKind::kGelu, {y}, tanh);
    if (residual) y = b.node(OpKind::kAdd, {b.input("r", {2, 5, 7}), y});
    b.g.mark_output(y);
  };
  for (bool residual : {false, true}) {
    auto counts = fuse_and_compare([&](Builder& b) { build(b, residual); }, "fuse_linear", 1);
    EXPECT_EQ(counts, (std::map<OpKind, int>{{OpKind::kLinear, 1}})) << residual;
  }
}

// x + gate * Linear(h), DiT's adaLN-Zero gate: [B, 1, N] (or [N]) is taken
// into kiln.Linear; a Mul by a full-size tensor is not a gate.
TEST(Fusion, LinearWithGate) {
  enum class Gate { kPerBatch, kForAll, kFullSize };
  auto build = [](Builder& b, Gate gate, bool residual) {
    Value* x = b.input("x", {2, 16, 12});
    std::vector<float> w(12 * 7), bias(7);
    for (size_t i = 0; i < w.size(); ++i) w[i] = float(int(i % 11) - 5) * 0.1f;
    for (size_t i = 0; i < bias.size(); ++i) bias[i] = 0.3f * float(i) - 1;
    Value* y = b.node(OpKind::kAdd, {b.node(OpKind::kMatMul, {x, b.constant({12, 7}, w)}), b.constant({7}, bias)});
    const Shape gate_shape = gate == Gate::kPerBatch ? Shape{2, 1, 7}
                             : gate == Gate::kForAll ? Shape{7}
                                                     : Shape{2, 16, 7};
    y = b.node(OpKind::kMul, {b.input("gate", gate_shape), y});
    if (residual) y = b.node(OpKind::kAdd, {b.input("r", {2, 16, 7}), y});
    b.g.mark_output(y);
  };
  for (bool residual : {false, true}) {
    for (Gate gate : {Gate::kPerBatch, Gate::kForAll}) {
      auto counts = fuse_and_compare([&](Builder& b) { build(b, gate, residual); }, "fuse_linear", 1);
      EXPECT_EQ(counts, (std::map<OpKind, int>{{OpKind::kLinear, 1}})) << residual;
    }
    auto counts = fuse_and_compare([&](Builder& b) { build(b, Gate::kFullSize, residual); }, "fuse_linear", 1);
    std::map<OpKind, int> want = {{OpKind::kLinear, 1}, {OpKind::kMul, 1}};
    if (residual) want[OpKind::kAdd] = 1;
    EXPECT_EQ(counts, want) << residual;
  }
}

TEST(Fusion, ConvWithActivation) {
  auto counts = fuse_and_compare(
      [](Builder& b) {
        Value* x = b.input("x", {1, 4, 6, 6});
        std::vector<float> w(4 * 4 * 9);
        for (size_t i = 0; i < w.size(); ++i) w[i] = float(int(i % 7) - 3) * 0.05f;
        Attributes conv;
        conv.set("kernel_shape", std::vector<int64_t>{3, 3});
        conv.set("pads", std::vector<int64_t>{1, 1, 1, 1});
        Value* h = b.node(OpKind::kConv, {x, b.constant({4, 4, 3, 3}, w), b.constant({4}, {0.1f, -0.2f, 0.3f, 0})}, conv);
        // The SiLU is fused; the ResNet skip Add is not (see fuse_conv.cc).
        b.g.mark_output(b.node(OpKind::kAdd, {x, b.node(OpKind::kSilu, {h})}));
      },
      "fuse_conv", 1);
  EXPECT_EQ(counts, (std::map<OpKind, int>{{OpKind::kFusedConv, 1}, {OpKind::kAdd, 1}}));
}

// Every LayerNorm, GELU, SiLU, GroupNorm and attention pattern in the
// reference models is fused, and none of their pieces is left behind.
TEST(Fusion, ExactCountsOnTheReferenceModels) {
  struct Expected {
    std::map<std::string, int64_t> dims;
    std::map<std::string, int64_t> counts;
  };
  const std::map<std::string, Expected> models = {
      {"text_encoder",  // 2 layers: QuickGELU MLPs, causal attention; 2 x 2 + final LayerNorm
       {{{"batch", 2}, {"sequence", 16}},
        {{"fuse_layer_norm", 5}, {"fuse_adaln", 0}, {"fuse_gelu", 2}, {"fuse_attention", 2}, {"fuse_silu", 0}, {"fuse_group_norm", 0},
         {"fuse_linear", 12}, {"fuse_linear_activation", 2}, {"fuse_linear_gate", 0}, {"fuse_linear_residual", 4},
         {"fuse_qkv", 2}, {"fuse_qkv_projections", 6}}}},
      // dit: 4 blocks: tanh-GELU MLPs; 4 x 2 + final LayerNorm; SiLU in the
      // timestep/adaLN MLPs; 4 x 2 gated residuals
      {"dit",
       {{{"batch", 2}},
        {{"fuse_layer_norm", 9}, {"fuse_adaln", 9}, {"fuse_gelu", 4}, {"fuse_attention", 4}, {"fuse_silu", 2}, {"fuse_group_norm", 0},
         {"fuse_linear", 25}, {"fuse_linear_activation", 4}, {"fuse_linear_gate", 8}, {"fuse_linear_residual", 8},
         {"fuse_qkv", 4}, {"fuse_qkv_projections", 12}}}},
      {"dit_tiny",
       {{{"batch", 2}},
        {{"fuse_layer_norm", 13}, {"fuse_adaln", 13}, {"fuse_gelu", 6}, {"fuse_attention", 6}, {"fuse_silu", 2}, {"fuse_group_norm", 0},
         {"fuse_linear", 37}, {"fuse_linear_activation", 6}, {"fuse_linear_gate", 12}, {"fuse_linear_residual", 12},
         {"fuse_qkv", 6}, {"fuse_qkv_projections", 18}}}},
      // unet: 7 transformer blocks (self + cross attention, GEGLU; Q, K, V of
      // each self-attention and K, V of each cross-attention merge); 24
      // GroupNorms, 17 followed by SiLU
      {"unet",
       {{{"batch", 2}, {"height", 16}, {"width", 16}, {"sequence", 8}},
        {{"fuse_layer_norm", 21}, {"fuse_gelu", 7}, {"fuse_attention", 14}, {"fuse_silu", 19},
         {"fuse_group_norm", 24}, {"fuse_group_norm_with_silu", 17}, {"fuse_linear", 28}, {"fuse_linear_gate", 0}, {"fuse_linear_residual", 21},
         {"fuse_conv", 0}, {"fuse_geglu", 7}, {"fuse_qkv", 14}, {"fuse_qkv_projections", 35}}}},
      {"vae_decoder",  // 14 GroupNorms, 13 followed by SiLU; one mid-block attention
       {{{"batch", 1}, {"height", 8}, {"width", 8}},
        {{"fuse_layer_norm", 0}, {"fuse_gelu", 0}, {"fuse_attention", 1}, {"fuse_silu", 13},
         {"fuse_group_norm", 14}, {"fuse_group_norm_with_silu", 13}, {"fuse_linear", 4},
         {"fuse_conv", 0}, {"fuse_qkv", 1}, {"fuse_qkv_projections", 3}}}},
  };
  const std::set<OpKind> pieces = {OpKind::kReduceMean, OpKind::kErf, OpKind::kTanh, OpKind::kSigmoid,
                                   OpKind::kSoftmax, OpKind::kInstanceNormalization};
  for (const auto& [model, want] : models) {
    auto g = onnx_import_file((fs::path(KILN_SOURCE_DIR) / "tests" / "models" / model / "model.onnx").string());
    ASSERT_TRUE(g.ok());
    ASSERT_TRUE(specialize_shapes(*g, want.dims).ok());
    PassStats stats;
    Status s = run_passes(*g, PassOptions{}, &stats);
    ASSERT_TRUE(s.ok()) << s.message();
    for (const auto& [pass, count] : want.counts) EXPECT_EQ(stats.counts[pass], count) << model << " " << pass;
    for (const auto& n : g->nodes())
      EXPECT_FALSE(pieces.count(n->op)) << model << ": " << node_label(*n) << " is left unfused";
  }
}

}  // namespace
}  // namespace kiln
