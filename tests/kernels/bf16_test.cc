// Nodes marked to compute in bf16 (passes' assign_precision): MatMul, Gemm,
// kiln.Linear, Conv and kiln.Conv round their operands to bf16 and accumulate
// in f32. On inputs bf16 holds exactly they must match the f32 reference up
// to summation order, eagerly and replayed in a plan (weights rounded and
// packed once); on other inputs they must differ from f32 by bf16's rounding,
// no more and no less.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/gemm.h"
#include "op_test_util.h"
#include "passes/pass.h"

namespace kiln::testing {
namespace {

using Ints = std::vector<int64_t>;

// The cases, their products marked bf16 or not, on inputs bf16 holds exactly
// or on arbitrary ones.
std::vector<double> causal_mask(int64_t n) {
  std::vector<double> v;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) v.push_back(j > i ? -INFINITY : 0.0);
  return v;
}

constexpr double kAttentionTolerance = 1e-2, kWinogradTolerance = 1e-2;

std::vector<OpCase> cases(bool bf16, bool exact) {
  auto a = [&](std::initializer_list<std::pair<std::string, AttributeValue>> items) {
    Attributes out = attrs(items);
    if (bf16) out.set(std::string(kComputeDtypeAttr), std::string("bf16"));
    return out;
  };
  // The perms fuse_attention gives Q, K, V of shape [B, S, H, Dh].
  const Attributes bshd = a({{"scale", 0.25f}, {"q_perm", Ints{0, 2, 1, 3}}, {"k_perm", Ints{0, 2, 3, 1}},
                             {"v_perm", Ints{0, 2, 1, 3}}, {"out_perm", Ints{0, 2, 1, 3}}});
  Attributes sliced = bshd;  // Q, K and V each 2 of 6 heads
  sliced.set("q_slice", Ints{2, 0, 2});
  sliced.set("k_slice", Ints{2, 2, 2});
  sliced.set("v_slice", Ints{2, 4, 2});
  auto x = [&](Shape s) { return exact ? bf16_exact(std::move(s)) : f32(std::move(s)); };
  const Attributes conv3 = a({{"kernel_shape", Ints{3, 3}}, {"pads", Ints{1, 1, 1, 1}}});
  Attributes conv3_winograd = conv3;
  conv3_winograd.set("winograd", int64_t(1));
  Attributes conv3_winograd_named = conv3;  // F(2x2, 3x3) named, whatever pays
  conv3_winograd_named.set("winograd", int64_t(2));
  const Attributes conv3_gelu = a({{"kernel_shape", Ints{3, 3}}, {"pads", Ints{1, 1, 1, 1}}, {"activation", std::string("gelu")}});
  return {
      {"MatMul by a weight", OpKind::kMatMul, a({}), {x({2, 64, 32}), x({32, 48})}},
      {"MatMul by a vector", OpKind::kMatMul, a({}), {x({3, 40}), x({40})}},
      {"MatMul batched (attention scores)", OpKind::kMatMul, a({}), {x({2, 4, 16, 8}), x({2, 4, 8, 16})}},
      {"MatMul batch broadcast both ways", OpKind::kMatMul, a({}), {x({2, 1, 3, 4}), x({1, 5, 4, 6})}},
      {"MatMul vector x batched", OpKind::kMatMul, a({}), {x({4}), x({2, 4, 5})}},
      {"Gemm transB with C", OpKind::kGemm, a({{"transB", int64_t(1)}}), {x({8, 32}), x({48, 32}), f32({48})}},
      {"Gemm no C", OpKind::kGemm, a({}), {x({5, 24}), x({24, 7})}},
      {"Gemm transA (f32: no bf16 path)", OpKind::kGemm, a({{"transA", int64_t(1)}}), {x({4, 3}), x({4, 5})}},
      {"Linear gelu + residual", OpKind::kLinear, a({{"activation", std::string("gelu")}}),
       {x({2, 64, 96}), x({96, 80}), f32({80}), f32({2, 64, 80})}},
      {"Linear swish (QuickGELU)", OpKind::kLinear, a({{"activation", std::string("swish")}, {"alpha", 1.702f}}),
       {x({9, 33}), x({33, 20}), f32({20})}},
      {"Linear transB (PyTorch's layout), no bias", OpKind::kLinear, a({{"transB", int64_t(1)}}),
       {x({2, 40, 96}), x({80, 96})}},
      // On kiln's bf16 GEMM: rows past a 96-row block and not a whole tile,
      // an odd K past one 2304-deep slice, columns past a panel.
      {"Linear past a block and a slice", OpKind::kLinear, a({}), {x({2, 101, 2501}), x({2501, 45}), f32({45})}},
      // A weight past 1 MiB packed, whose tiles prefetch the next panel:
      // K not a whole number of prefetched lines (1030 = 128 x 8 + 6).
      {"Linear, weight past L2 (prefetched panels)", OpKind::kLinear, a({}), {x({100, 1030}), x({1030, 520}), f32({520})}},
      // A weight past 2.5 MiB packed: the columns split, and A is rounded in
      // a pass before the products (below, each thread rounds its rows).
      {"Linear, weight past 2.5 MiB (A rounded first)", OpKind::kLinear, a({}),
       {x({30, 1301}), x({1301, 1040}), f32({1040})}},
      // With AMX, a K past 4096 (two slices) and a weight past 2.5 MiB: each
      // thread's tiles are whole columns of its rows (130: two blocks of 96
      // and a last short AMX tile), walked a slice at a time; with the
      // gated residual's epilogue on the last slice.
      {"Linear, K past two AMX slices, whole columns + gated residual", OpKind::kLinear, a({}),
       {x({2, 65, 4610}), x({4610, 330}), f32({330}), f32({2, 65, 330}), f32({2, 1, 330})}},
      {"Linear gated (DiT's adaLN-Zero) + residual", OpKind::kLinear, a({}),
       {x({2, 24, 40}), x({40, 36}), f32({36}), f32({2, 24, 36}), f32({2, 1, 36})}},
      // Convs with at least 32 output channels per group (fewer run in f32).
      {"Conv 3x3 pad 1", OpKind::kConv, conv3, {x({2, 16, 12, 12}), x({40, 16, 3, 3}), f32({40})}},
      {"Conv stride 2 no bias", OpKind::kConv, a({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}}),
       {x({1, 8, 11, 10}), x({32, 8, 3, 3})}},
      {"Conv groups", OpKind::kConv, a({{"kernel_shape", Ints{3, 3}}, {"group", int64_t(2)}}),
       {x({1, 4, 6, 6}), x({64, 2, 3, 3}), f32({64})}},
      {"Conv 1-d", OpKind::kConv, a({{"kernel_shape", Ints{3}}, {"pads", Ints{1, 1}}}),
       {x({2, 3, 11}), x({32, 3, 3}), f32({32})}},
      {"kiln.Conv gelu + residual", OpKind::kFusedConv, conv3_gelu,
       {x({2, 8, 9, 9}), x({48, 8, 3, 3}), f32({48}), f32({2, 48, 9, 9})}},
      // Fewer chunks of pixels than threads (the output channels split,
      // sharing the packed patches), an odd K.
      {"Conv 1x1, odd channels, one chunk of pixels", OpKind::kConv, a({{"kernel_shape", Ints{1, 1}}}),
       {x({1, 33, 7, 7}), x({32, 33, 1, 1}), f32({32})}},
      {"Conv 4 outputs (f32: no bf16 path below 32 output channels)", OpKind::kConv, conv3,
       {x({1, 16, 8, 8}), x({4, 16, 3, 3}), f32({4})}},
      // Marked by the winograd_conv pass, enough tiles even for an eager
      // call (544): on CPUs with AVX512-BF16, Winograd's 16 GEMMs in bf16.
      // Its transforms of exact inputs are not exact in bf16 (kWinogradTolerance).
      {"Conv 3x3 by Winograd", OpKind::kConv, conv3_winograd, {x({2, 32, 32, 34}), x({40, 32, 3, 3}), f32({40})}},
      // Both images' 42 tiles in one chunk (columns 42-83 the second's), an
      // odd channel count (the last paired with zeros).
      {"Conv 3x3 by Winograd, one chunk", OpKind::kConv, conv3_winograd_named,
       {x({2, 33, 12, 14}), x({40, 33, 3, 3}), f32({40})}},
      // Attention also rounds the probabilities to bf16 before P V: never
      // exact (kAttentionTolerance). Sizes past one 128-row tile and one
      // 512-key block, so short last tiles and online softmax are covered;
      // below 64 keys it runs in f32.
      {"Attention bshd, 40 keys (f32: no bf16 path below 64 keys)", OpKind::kAttention, bshd,
       {x({2, 40, 4, 16}), x({2, 40, 4, 16}), x({2, 40, 4, 16})}},
      {"Attention rows and keys past a tile", OpKind::kAttention, bshd,
       {x({1, 300, 2, 24}), x({1, 1100, 2, 24}), x({1, 1100, 2, 20})}},
      {"Attention odd head dim, odd keys in the last block", OpKind::kAttention, bshd,
       {x({1, 70, 2, 9}), x({1, 515, 2, 9}), x({1, 515, 2, 7})}},
      {"Attention on slices of heads (fuse_qkv's)", OpKind::kAttention, sliced,
       {x({1, 300, 6, 24}), x({1, 300, 6, 24}), x({1, 300, 6, 24})}},
      {"Attention rank 3 with a mask", OpKind::kAttention, a({{"scale", 0.3f}}),
       {x({3, 10, 8}), x({3, 8, 600}), x({3, 600, 5}), f32({10, 600}, -3, 3)}},
      {"Attention causal", OpKind::kAttention, a({{"scale", 0.25f}}),
       {x({1, 520, 16}), x({1, 16, 520}), x({1, 520, 16}),
        {DType::kF32, {520, 520}, causal_mask(520)}}},
  };
}

TEST(Bf16, ExactInputsMatchTheF32Reference) {
  for (OpCase c : cases(true, true)) {
    // Else exact products, f32 sums.
    c.tolerance = c.op == OpKind::kAttention               ? kAttentionTolerance
                  : c.label.find("Winograd") != std::string::npos ? kWinogradTolerance
                                                                  : 1e-5;
    check_op(c) && check_op_in_plan(c);
  }
}

// On arbitrary inputs the error against f32 is that of rounding each operand
// to bf16 (8 significant bits, relative 2^-9): over 1e-4 of the output's
// scale (so the bf16 path ran) and under 2e-2; eagerly and in a plan.
TEST(Bf16, ArbitraryInputsAreRounded) {
  const std::vector<OpCase> bf16 = cases(true, false), f32 = cases(false, false);
  for (size_t k = 0; k < 2 * bf16.size(); ++k) {
    const bool in_plan = k >= bf16.size();
    const OpCase& c = bf16[k % bf16.size()];
    SCOPED_TRACE(c.label + (in_plan ? " (in a plan)" : ""));
    const std::vector<Tensor> y = run_cpu(c, in_plan), want = run_cpu(f32[k % bf16.size()], in_plan);
    ASSERT_EQ(y.size(), 1u);
    ASSERT_EQ(want.size(), 1u);
    double scale = 0, err = 0;
    for (int64_t i = 0; i < want[0].numel(); ++i) {
      scale = std::max(scale, std::abs(want[0].element_as_double(i)));
      err = std::max(err, std::abs(want[0].element_as_double(i) - y[0].element_as_double(i)));
    }
    EXPECT_LT(err, 2e-2 * scale);
    if (c.label.find("no bf16 path") == std::string::npos) {
      EXPECT_GT(err, 1e-4 * scale);
    }
  }
}

// Where bf16_gemm() picks kiln's GEMM (kKiln: AVX512-BF16, on AMX tiles where the CPU has them; kKilnF32:
// no AVX512-BF16, as ctest's without_avx512 has it), the products of
// kiln.Linear, Gemm, MatMul by a weight (kKilnF32: every MatMul),
// kiln.Attention and 1-D and 2-D convolutions of one group run on it, and a
// plan's replay of them allocates nothing; grouped bf16 Convs still run on
// oneDNN, whose executions allocate (which shows the count is live). Where
// it picks oneDNN's primitives (KILN_BF16_GEMM=onednn as ctest's
// bf16_on_onednn sets it), the Linears' replays allocate: the choice took
// effect.
TEST(Bf16, GemmProductsReplayWithoutAllocating) {
  if (replay_allocations(cases(true, false)[0]) < 0) GTEST_SKIP() << "no heap counter (sanitizer build)";
  const bool kiln_gemm = bf16_gemm() != Bf16Gemm::kOnednn;
  for (const OpCase& c : cases(true, false)) {
    SCOPED_TRACE(c.label);
    const bool on_gemm = c.op == OpKind::kLinear || c.op == OpKind::kAttention || c.label.starts_with("Gemm transB") ||
                         c.label == "Gemm no C" || c.label.starts_with("MatMul by a") ||
                         (c.op == OpKind::kMatMul && bf16_gemm() == Bf16Gemm::kKilnF32) ||
                         ((c.op == OpKind::kConv || c.op == OpKind::kFusedConv) && c.label != "Conv groups");
    if (!kiln_gemm) {
      if (c.op == OpKind::kLinear) {
        EXPECT_GT(replay_allocations(c), 0);
      } else if (c.op == OpKind::kAttention) {
        EXPECT_EQ(replay_allocations(c), 0);
      }
    } else if (on_gemm) {
      EXPECT_EQ(replay_allocations(c), 0);
    } else if (c.label == "Conv groups") {
      EXPECT_GT(replay_allocations(c), 0);
    }
  }
}

// KILN_BF16_GEMM takes auto, kiln or onednn (or nothing); any other value is
// an error that names it.
TEST(Bf16, GemmSettingIsChecked) {
  const char* before = std::getenv("KILN_BF16_GEMM");
  const std::string saved = before ? before : "";
  for (const char* ok : {"", "auto", "kiln", "onednn"}) {
    setenv("KILN_BF16_GEMM", ok, 1);
    EXPECT_TRUE(check_bf16_gemm_setting().ok()) << ok;
  }
  unsetenv("KILN_BF16_GEMM");
  EXPECT_TRUE(check_bf16_gemm_setting().ok());
  setenv("KILN_BF16_GEMM", "amx", 1);
  const Status bad = check_bf16_gemm_setting();
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("KILN_BF16_GEMM=amx"), std::string::npos) << bad.message();
  if (before) setenv("KILN_BF16_GEMM", saved.c_str(), 1);
  else unsetenv("KILN_BF16_GEMM");
}

// The vector loops that round whole buffers (a bf16 product's f32 operands)
// give f32_to_bf16's bits for every value: ties both ways, NaNs with
// payloads, infinities, zeros, subnormals, the largest floats (which round
// to infinity) and random bit patterns; at lengths with and without a tail
// of whole vectors, and one split across threads.
TEST(Bf16, BufferRoundingMatchesTheScalarConversion) {
  std::vector<uint32_t> bits = {0x3F808000, 0x3F818000, 0xBF808000, 0x3F80FFFF, 0x7FC00000, 0xFFC00001,
                                0x7F800001, 0x7FBF0000, 0x7F800000, 0xFF800000, 0x00000000, 0x80000000,
                                0x00000001, 0x007FFFFF, 0x807F8000, 0x7F7FFFFF, 0xFF7FFFFF, 0x3F800000};
  std::mt19937 rng(7);
  while (bits.size() < 70000) bits.push_back(uint32_t(rng()));
  std::vector<float> x(bits.size());
  std::memcpy(x.data(), bits.data(), bits.size() * sizeof(float));
  for (const size_t n : {size_t(0), size_t(1), size_t(15), size_t(16), size_t(17), size_t(18), size_t(100),
                         bits.size()}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    std::vector<bf16> rounded(n + 1, bf16{0x1234});
    std::vector<float> through(n + 1, 5.0f);
    round_to_bf16(x.data(), rounded.data(), int64_t(n), true);
    round_through_bf16(x.data(), through.data(), int64_t(n), true);
    for (size_t i = 0; i < n; ++i) {
      const uint16_t want = f32_to_bf16(x[i]).bits;
      ASSERT_EQ(rounded[i].bits, want) << "input bits " << std::hex << bits[i];
      uint32_t got;
      std::memcpy(&got, &through[i], sizeof(got));
      ASSERT_EQ(got, uint32_t(want) << 16) << "input bits " << std::hex << bits[i];
    }
    EXPECT_EQ(rounded[n].bits, 0x1234);  // nothing written past n
    EXPECT_EQ(through[n], 5.0f);
  }
}

// pack_bf16 lays B out as gemm.h says (panels of panel_width() columns, K's
// rows in pairs interleaved column by column, zeros past n and past an odd
// K) for B's columns contiguous (a weight), its rows contiguous (a
// transposed weight, attention's Kᵀ) and neither, whole and partial panels.
// (Rows contiguous, K 64 and 73, whole panels: with AVX-512, 32 of K's rows
// at a time by PackBf16Columns' transposes, then the rest one pair at a time.)
TEST(Bf16, PackedOperandsFollowTheDocumentedLayout) {
  const int64_t w = gemm::panel_width();
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  for (const int64_t k : {1, 2, 5, 64, 73})
    for (const int64_t n : {1, 31, 32, 64, 70})
      for (const int layout : {0, 1, 2}) {
        // (t, j) at b[t * row_stride + j * col_stride]: rows of n, columns of k, or every other element.
        const int64_t row_stride = layout == 0 ? n : layout == 1 ? 1 : 2 * n;
        const int64_t col_stride = layout == 0 ? 1 : layout == 1 ? k : 2;
        SCOPED_TRACE("k " + std::to_string(k) + ", n " + std::to_string(n) + ", layout " + std::to_string(layout));
        std::vector<float> b(size_t(2 * k * n));
        for (float& x : b) x = u(rng);
        std::vector<bf16> packed(size_t(gemm::packed_bf16_count(k, n)), bf16{0x1234});
        gemm::pack_bf16(b.data(), row_stride, col_stride, k, n, packed.data(), 0.5f);
        const int64_t depth = gemm::bf16_depth(k), panels = (n + w - 1) / w;
        ASSERT_EQ(int64_t(packed.size()), panels * w * depth);
        for (int64_t p = 0; p < panels; ++p)
          for (int64_t t = 0; t < depth; ++t)
            for (int64_t c = 0; c < w; ++c) {
              const int64_t j = p * w + c;
              const uint16_t want =
                  t < k && j < n ? f32_to_bf16(b[size_t(t * row_stride + j * col_stride)] * 0.5f).bits : 0;
              const size_t at = size_t((p * depth + t / 2 * 2) * w + 2 * c + t % 2);
              ASSERT_EQ(packed[at].bits, want) << "panel " << p << ", row " << t << ", column " << c;
            }
      }
}

}  // namespace
}  // namespace kiln::testing
