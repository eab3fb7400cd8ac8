// kiln.Attention: the CPU kernel against the reference, the reference against
// hand-computed values, the fused node against the unfused subgraph it
// replaces, replay without heap allocation, and shape inference.
#include <hwy/targets.h>

#include <cmath>
#include <limits>
#include <random>

#include "heap_counter/heap_counter.h"
#include "kernels/cpu/attention_simd.h"
#include "ir/shape_inference.h"
#include "op_test_util.h"
#include "runtime/eager_executor.h"
#include "runtime/plan.h"

namespace kiln::testing {
namespace {

using Ints = std::vector<int64_t>;

// The perms the fusion pass gives Q, K, V of shape [B, S, H, Dh] and the
// output [B, Sq, H, Dv].
Attributes bshd(float scale) {
  return attrs({{"scale", scale},
                {"q_perm", Ints{0, 2, 1, 3}},
                {"k_perm", Ints{0, 2, 3, 1}},
                {"v_perm", Ints{0, 2, 1, 3}},
                {"out_perm", Ints{0, 2, 1, 3}}});
}
Attributes scale_only(float scale) { return attrs({{"scale", scale}}); }
// `a` with the named operands sliced to 3 heads (dim 2) from a given head.
Attributes sliced(Attributes a, std::initializer_list<std::pair<const char*, int64_t>> first_heads) {
  for (const auto& [attr, head] : first_heads) a.set(attr, Ints{2, head, 3});
  return a;
}

// [rows, cols] of 0 and -inf: -inf where `masked(i, j)`.
InputSpec mask_where(int64_t rows, int64_t cols, bool (*masked)(int64_t, int64_t)) {
  std::vector<double> v;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) v.push_back(masked(i, j) ? -INFINITY : 0.0);
  return {DType::kF32, {rows, cols}, std::move(v)};
}

// `period` mask values, 0 but for +inf at `at`.
std::vector<double> plus_inf_at(size_t at, size_t period) {
  std::vector<double> v(period, 0.0);
  v[at] = INFINITY;
  return v;
}

TEST(Attention, MatchesReference) {
  const OpKind op = OpKind::kAttention;
  for (const OpCase& c : std::vector<OpCase>{
           {"bshd", op, bshd(0.25f), {f32({2, 16, 4, 16}), f32({2, 16, 4, 16}), f32({2, 16, 4, 16})}},
           {"identity rank 4", op, scale_only(0.3f), {f32({2, 3, 10, 8}), f32({2, 3, 8, 12}), f32({2, 3, 12, 8})}},
           {"identity rank 3", op, scale_only(0.3f), {f32({3, 10, 8}), f32({3, 8, 12}), f32({3, 12, 5})}},
           {"rank 3, sequence first", op,
            attrs({{"scale", 0.5f}, {"q_perm", Ints{1, 0, 2}}, {"k_perm", Ints{1, 2, 0}}, {"v_perm", Ints{1, 0, 2}},
                   {"out_perm", Ints{1, 0, 2}}}),
            {f32({19, 3, 8}), f32({23, 3, 8}), f32({23, 3, 6})}},
           {"cross attention, Dv != D", op, bshd(0.25f), {f32({2, 37, 2, 16}), f32({2, 77, 2, 16}), f32({2, 77, 2, 24})}},
           {"keys past one block", op, bshd(0.2f), {f32({1, 45, 3, 16}), f32({1, 300, 3, 16}), f32({1, 300, 3, 16})}},
           {"head dims strided", op,
            attrs({{"scale", 0.3f}, {"q_perm", Ints{0, 1, 3, 2}}, {"v_perm", Ints{0, 1, 3, 2}},
                   {"out_perm", Ints{0, 1, 3, 2}}}),
            {f32({1, 2, 12, 41}), f32({1, 2, 12, 70}), f32({1, 2, 9, 70})}},
           {"large scores", op, scale_only(1.0f), {f32({1, 20, 16}, -6, 6), f32({1, 16, 90}, -6, 6), f32({1, 90, 7})}},
           {"mask [Sq, Sk]", op, bshd(0.25f),
            {f32({2, 37, 2, 16}), f32({2, 77, 2, 16}), f32({2, 77, 2, 16}), f32({37, 77}, -3, 3)}},
           {"mask [B, 1, Sq, Sk]", op, bshd(0.25f),
            {f32({2, 37, 2, 16}), f32({2, 77, 2, 16}), f32({2, 77, 2, 16}), f32({2, 1, 37, 77}, -3, 3)}},
           {"mask [1, Sk]", op, bshd(0.25f),
            {f32({2, 37, 2, 16}), f32({2, 77, 2, 16}), f32({2, 77, 2, 16}), f32({1, 77}, -3, 3)}},
           {"causal mask", op, bshd(0.25f),
            {f32({1, 150, 2, 16}), f32({1, 150, 2, 16}), f32({1, 150, 2, 16}),
             mask_where(150, 150, [](int64_t i, int64_t j) { return j > i; })}},
           {"first key blocks masked", op, bshd(0.25f),
            {f32({1, 150, 2, 16}), f32({1, 150, 2, 16}), f32({1, 150, 2, 16}),
             mask_where(150, 150, [](int64_t i, int64_t j) { return j < i; })}},
           {"fully masked rows give NaN", op, scale_only(0.5f),
            {f32({2, 5, 8}), f32({2, 8, 70}), f32({2, 70, 8}),
             mask_where(5, 70, [](int64_t i, int64_t) { return i % 2 == 1; })}},
           {"NaN or +inf scores give NaN rows", op, scale_only(0.5f),
            {{DType::kF32, {1, 6, 4}, std::vector<double>{1, -0.5, NAN, 2, 0.25, -1, 0.5}}, f32({1, 4, 9}), f32({1, 9, 3}),
             {DType::kF32, {6, 9}, plus_inf_at(22, 23)}}},
           {"no keys", op, bshd(0.25f), {f32({1, 5, 2, 8}), f32({1, 0, 2, 8}), f32({1, 0, 2, 8})}},
           {"no queries", op, bshd(0.25f), {f32({1, 0, 2, 8}), f32({1, 6, 2, 8}), f32({1, 6, 2, 8})}},
           {"threaded", op, bshd(0.125f), {f32({1, 512, 2, 64}), f32({1, 512, 2, 64}), f32({1, 512, 2, 64})}},
           // 16-column blocks and a tail of 8, both halves of a task, the last task 13 rows
           {"head dim 72", op, bshd(0.12f), {f32({2, 45, 2, 72}), f32({2, 70, 2, 72}), f32({2, 70, 2, 72})}},
           // fuse_qkv's operands: each its own slice of heads of a merged projection.
           {"sliced heads", op, sliced(bshd(0.25f), {{"q_slice", 0}, {"k_slice", 3}, {"v_slice", 6}}),
            {f32({2, 20, 9, 16}), f32({2, 20, 9, 16}), f32({2, 20, 9, 16})}},
           {"sliced K and V, mask", op, sliced(bshd(0.25f), {{"k_slice", 0}, {"v_slice", 3}}),
            {f32({2, 37, 3, 16}), f32({2, 77, 6, 16}), f32({2, 77, 6, 16}), f32({37, 77}, -3, 3)}},
       })
    check_op(c);
}

// The tile sizes follow the vector width, and a CI machine may pick another
// target than this one does, so check each.
TEST(Attention, EveryHighwayTarget) {
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    SCOPED_TRACE(hwy::TargetName(target));
    hwy::SetSupportedTargetsForTest(target);
    for (const OpCase& c : std::vector<OpCase>{
             {"bshd, masked", OpKind::kAttention, bshd(0.25f),
              {f32({2, 37, 2, 16}), f32({2, 77, 2, 16}), f32({2, 77, 2, 13}), f32({37, 77}, -3, 3)}},
             {"head dim 40", OpKind::kAttention, bshd(0.15f),
              {f32({1, 29, 2, 40}), f32({1, 50, 2, 40}), f32({1, 50, 2, 40})}},
             {"causal, rank 3", OpKind::kAttention, scale_only(0.3f),
              {f32({1, 70, 5}), f32({1, 5, 70}), f32({1, 70, 6}),
               mask_where(70, 70, [](int64_t i, int64_t j) { return j > i; })}},
         })
      check_op(c);
  }
  hwy::SetSupportedTargetsForTest(0);
}

// bf16 attention's softmax step writes its probabilities as bf16 with a
// cheaper exp: within one bf16 step (or both below 2^-120) of the f32 step's
// exps rounded, with the same running max and the sums within 1e-4; on two
// blocks of 77 keys (a lane tail), over rows of ordinary scores, of a very
// wide range and of all -inf; a row with a NaN keeps a NaN max.
TEST(Attention, OnlineSoftmaxRowsInBf16) {
  constexpr int64_t kRowsCount = 4, kKeys = 77, kStride = 80;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> ordinary(-8.0f, 8.0f), wide(-150.0f, 20.0f);
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    SCOPED_TRACE(hwy::TargetName(target));
    hwy::SetSupportedTargetsForTest(target);
    std::vector<float> max32(kRowsCount, -INFINITY), sum32(kRowsCount, 0), alpha32(kRowsCount);
    std::vector<float> max16 = max32, sum16 = sum32, alpha16(kRowsCount);
    for (int block = 0; block < 2; ++block) {
      std::vector<float> scores(kRowsCount * kStride);
      for (int64_t j = 0; j < kKeys; ++j) {
        scores[0 * kStride + j] = ordinary(rng);
        scores[1 * kStride + j] = wide(rng);
        scores[2 * kStride + j] = -INFINITY;
        scores[3 * kStride + j] = j == 40 && block == 1 ? NAN : ordinary(rng);
      }
      std::vector<float> exps = scores;
      std::vector<bf16> probabilities(kRowsCount * kStride);
      attention_simd::online_softmax_rows(exps.data(), kRowsCount, kKeys, kStride, max32.data(), sum32.data(),
                                          alpha32.data());
      attention_simd::online_softmax_rows(scores.data(), kRowsCount, kKeys, kStride, max16.data(), sum16.data(),
                                          alpha16.data(), probabilities.data());
      for (int64_t r = 0; r < kRowsCount; ++r) {
        SCOPED_TRACE("block " + std::to_string(block) + ", row " + std::to_string(r));
        if (std::isnan(max32[r])) {  // a NaN seen: the kernels make the row NaN, whatever the exps
          EXPECT_TRUE(std::isnan(max16[r]));
          continue;
        }
        EXPECT_EQ(max16[r], max32[r]);
        EXPECT_EQ(alpha16[r], alpha32[r]);
        // Where bf16 products run, bf16's exps are within 7.9e-5 (ExpForBf16).
        EXPECT_NEAR(sum16[r], sum32[r], 1e-4 * std::max(1.0f, sum32[r]));
        for (int64_t j = 0; j < kKeys; ++j) {
          const float want = exps[r * kStride + j];
          const bf16 got = probabilities[r * kStride + j];
          if (want >= 0x1p-120f) {
            EXPECT_LE(std::abs(int(got.bits) - int(f32_to_bf16(want).bits)), 1) << j << ": " << want;
          } else {
            EXPECT_LT(bf16_to_f32(got), 0x1p-119f) << j;
          }
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

TEST(Attention, ReferenceValues) {
  // One query against two keys: scores (1, 2) * 0.5 + (0, -1) = (0.5, 0),
  // softmax (e^0.5, 1) / (e^0.5 + 1), then the weighted rows of V.
  const OpCase c{"tiny", OpKind::kAttention, scale_only(0.5f),
                 {{DType::kF32, {1, 1, 2}, std::vector<double>{1, 2}},
                  {DType::kF32, {1, 2, 2}, std::vector<double>{1, 0, 0, 1}},
                  {DType::kF32, {1, 2, 3}, std::vector<double>{1, 2, 3, -1, 0, 5}},
                  {DType::kF32, {2}, std::vector<double>{0, -1}}}};
  const double p0 = std::exp(0.5) / (std::exp(0.5) + 1), p1 = 1 - p0;
  const Tensor y = run_reference(c)[0];
  ASSERT_EQ(y.shape(), (Shape{1, 1, 3}));
  const double want[] = {p0 - p1, 2 * p0, 3 * p0 + 5 * p1};
  for (int64_t i = 0; i < 3; ++i) EXPECT_NEAR(y.element_as_double(i), want[i], 1e-7) << i;
}

Tensor random_tensor(Shape shape, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-2, 2);
  std::vector<float> v(size_t(shape_numel(shape)));
  for (float& x : v) x = dist(rng);
  return *Tensor::from_vector<float>(shape, v);
}

// Transpose/MatMul/Mul/Add/Softmax/MatMul/Transpose over [B, S, H, Dh]
// inputs, as an exported model computes attention.
Graph unfused_graph(const SymShape& q, const SymShape& kv, const SymShape& mask, float scale) {
  Graph g;
  Value* qi = g.add_input("q", DType::kF32, q);
  Value* ki = g.add_input("k", DType::kF32, kv);
  Value* vi = g.add_input("v", DType::kF32, kv);
  Value* mi = g.add_input("mask", DType::kF32, mask);
  Value* s = g.add_constant("scale", *Tensor::from_vector<float>({}, {scale}));
  auto transpose = [&](Value* x, Ints perm, const char* name) {
    Value* out = g.add_value(name);
    g.add_node(OpKind::kTranspose, name, {x}, {out}, attrs({{"perm", perm}}));
    return out;
  };
  auto node = [&](OpKind op, std::vector<Value*> in, const char* name, Attributes a = {}) {
    Value* out = g.add_value(name);
    g.add_node(op, name, std::move(in), {out}, std::move(a));
    return out;
  };
  Value* qh = transpose(qi, {0, 2, 1, 3}, "qh");
  Value* kt = transpose(ki, {0, 2, 3, 1}, "kt");
  Value* vh = transpose(vi, {0, 2, 1, 3}, "vh");
  Value* scores = node(OpKind::kAdd, {node(OpKind::kMul, {node(OpKind::kMatMul, {qh, kt}, "qk"), s}, "scaled"), mi}, "masked");
  Value* p = node(OpKind::kSoftmax, {scores}, "p", attrs({{"axis", int64_t(-1)}}));
  g.mark_output(transpose(node(OpKind::kMatMul, {p, vh}, "o"), {0, 2, 1, 3}, "y"));
  g.opset = 18;
  return g;
}

Graph fused_graph(const SymShape& q, const SymShape& kv, const SymShape& mask, float scale) {
  Graph g;
  std::vector<Value*> in = {g.add_input("q", DType::kF32, q), g.add_input("k", DType::kF32, kv),
                            g.add_input("v", DType::kF32, kv), g.add_input("mask", DType::kF32, mask)};
  Value* y = g.add_value("y");
  g.add_node(OpKind::kAttention, "attention", in, {y}, bshd(scale));
  g.mark_output(y);
  g.opset = 18;
  return g;
}

TEST(Attention, MatchesUnfusedSubgraph) {
  const Shape q{2, 50, 3, 24}, kv{2, 77, 3, 24}, mask{1, 77};
  const float scale = 1 / std::sqrt(24.0f);
  std::mt19937 rng(7);
  const NamedTensors inputs = {{"q", random_tensor(q, rng)}, {"k", random_tensor(kv, rng)},
                               {"v", random_tensor(kv, rng)}, {"mask", random_tensor(mask, rng)}};
  const Graph unfused = unfused_graph(sym_shape_from(q), sym_shape_from(kv), sym_shape_from(mask), scale);
  const Graph fused = fused_graph(sym_shape_from(q), sym_shape_from(kv), sym_shape_from(mask), scale);
  EagerExecutor unfused_exec(unfused), fused_exec(fused);
  auto want = unfused_exec.run(inputs);
  auto got = fused_exec.run(inputs);
  ASSERT_TRUE(want.ok()) << want.status().message();
  ASSERT_TRUE(got.ok()) << got.status().message();
  const Tensor &w = (*want)[0], &y = (*got)[0];
  ASSERT_EQ(y.shape(), (Shape{2, 50, 3, 24}));
  ASSERT_EQ(w.shape(), y.shape());
  for (int64_t i = 0; i < y.numel(); ++i) ASSERT_NEAR(y.data<float>()[i], w.data<float>()[i], 1e-5) << i;
}

TEST(Attention, ReplayAllocatesNothing) {
  if (!HeapCounter::available()) GTEST_SKIP() << "no allocation counter under AddressSanitizer";
  for (int64_t s : {20, 256}) {  // one thread, then the threaded path
    const Shape shape{1, s, 2, 32}, mask{s, s};
    auto plan = Plan::compile(fused_graph(sym_shape_from(shape), sym_shape_from(shape), sym_shape_from(mask), 0.2f), {});
    ASSERT_TRUE(plan.ok()) << plan.status().message();
    std::mt19937 rng(3);
    const Tensor q = random_tensor(shape, rng), m = random_tensor(mask, rng);
    for (const char* name : {"q", "k", "v"}) ASSERT_TRUE((*plan)->bind_input(name, q.view()).ok());
    ASSERT_TRUE((*plan)->bind_input("mask", m.view()).ok());
    ASSERT_TRUE((*plan)->run().ok());
    HeapCounter heap;
    for (int i = 0; i < 3; ++i) ASSERT_TRUE((*plan)->run().ok());
    EXPECT_EQ(heap.allocations(), 0) << "S = " << s;
  }
}

// Shape inference on one kiln.Attention node over graph inputs: the output
// shape, or the error.
Result<SymShape> infer(Attributes a, std::vector<SymShape> inputs) {
  Graph g;
  std::vector<Value*> in;
  for (size_t i = 0; i < inputs.size(); ++i) in.push_back(g.add_input("in" + std::to_string(i), DType::kF32, inputs[i]));
  Value* y = g.add_value("y");
  g.add_node(OpKind::kAttention, "attn", in, {y}, std::move(a));
  KILN_RETURN_IF_ERROR(graph_infer_shapes(g));
  return *y->shape;
}

void expect_error(const Result<SymShape>& r, std::string_view text) {
  ASSERT_FALSE(r.ok()) << "inferred " << sym_shape_to_string(*r);
  EXPECT_NE(r.status().message().find(text), std::string::npos) << r.status().message();
}

TEST(Attention, InfersShapes) {
  const Dim batch = Dim::named("batch"), seq = Dim::named("seq");
  const SymShape x{batch, seq, Dim(8), Dim(40)}, ctx{batch, Dim(77), Dim(8), Dim(40)};
  auto self = infer(bshd(0.1f), {x, x, x});
  ASSERT_TRUE(self.ok()) << self.status().message();
  EXPECT_EQ(sym_shape_to_string(*self), sym_shape_to_string(x));
  auto cross = infer(bshd(0.1f), {x, ctx, SymShape{Dim(), Dim(77), Dim(8), Dim(64)}, SymShape{Dim(1), Dim(77)}});
  ASSERT_TRUE(cross.ok()) << cross.status().message();
  EXPECT_EQ(sym_shape_to_string(*cross), sym_shape_to_string(SymShape{batch, seq, Dim(8), Dim(64)}));
  auto rank3 = infer(scale_only(1), {SymShape{Dim(4), Dim(9), Dim(16)}, SymShape{Dim(4), Dim(16), Dim()},
                                     SymShape{Dim(4), Dim(), Dim(3)}});
  ASSERT_TRUE(rank3.ok()) << rank3.status().message();
  EXPECT_EQ(sym_shape_to_string(*rank3), sym_shape_to_string(SymShape{Dim(4), Dim(9), Dim(3)}));
}

TEST(Attention, RejectsInvalidNodes) {
  const SymShape x{Dim(2), Dim(16), Dim(4), Dim(32)};
  Attributes bad_perm = bshd(0.1f);
  bad_perm.set("k_perm", Ints{0, 2, 3, 3});
  expect_error(infer(bad_perm, {x, x, x}), "k_perm [0,2,3,3] is not a permutation of 0..3");
  Attributes short_perm = bshd(0.1f);
  short_perm.set("out_perm", Ints{0, 2, 1});
  expect_error(infer(short_perm, {x, x, x}), "out_perm [0,2,1] is not a permutation of 0..3");
  const SymShape k16{Dim(2), Dim(16), Dim(4), Dim(16)};
  expect_error(infer(bshd(0.1f), {x, k16, x}), "Q and K disagree on the head dim (D): 32 vs 16");
  const SymShape v_short{Dim(2), Dim(15), Dim(4), Dim(32)};
  expect_error(infer(bshd(0.1f), {x, x, v_short}), "K and V disagree on the key count (Sk): 16 vs 15");
  const SymShape k_heads{Dim(2), Dim(16), Dim(8), Dim(32)};
  expect_error(infer(bshd(0.1f), {x, k_heads, k_heads}), "Q and K disagree on batch dim 1: 4 vs 8");
  expect_error(infer(bshd(0.1f), {x, x, x, SymShape{Dim(3), Dim(16)}}),
               "Mask shape [3,16] does not broadcast to the scores' shape [2,4,16,16]");
  const SymShape r2{Dim(16), Dim(32)};
  expect_error(infer(scale_only(1), {r2, r2, r2}), "Q, K and V must have rank 3 or 4, not 2");
  expect_error(infer(scale_only(1), {x, SymShape{Dim(16), Dim(4), Dim(32)}, x}), "K has rank 3 but Q has rank 4");
  expect_error(infer(attrs({{"q_perm", Ints{0, 2, 1, 3}}}), {x, x, x}), "scale (a float attribute) is required");
  Attributes past_end = bshd(0.1f);
  past_end.set("k_slice", Ints{2, 2, 3});
  expect_error(infer(past_end, {x, x, x}), "k_slice [2,2,3] is not [axis, start, length] within K's shape [2,16,4,32]");
  Attributes bad_axis = bshd(0.1f);
  bad_axis.set("v_slice", Ints{4, 0, 1});
  expect_error(infer(bad_axis, {x, x, x}), "v_slice [4,0,1] is not [axis, start, length]");
  Attributes huge = bshd(0.1f);
  huge.set("q_slice", Ints{2, std::numeric_limits<int64_t>::max(), 2});
  expect_error(infer(huge, {x, x, x}), "is not [axis, start, length]");
  auto f16 = [&] {
    Graph g;
    std::vector<Value*> in;
    for (const char* name : {"q", "k", "v"}) in.push_back(g.add_input(name, DType::kF16, x));
    g.add_node(OpKind::kAttention, "attn", in, {g.add_value("y")}, bshd(0.1f));
    return graph_infer_shapes(g);
  };
  EXPECT_EQ(f16().code(), StatusCode::kUnsupported);
}

}  // namespace
}  // namespace kiln::testing
