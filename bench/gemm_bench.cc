// kiln's GEMM (kernels/cpu/gemm.h) against oneDNN's matmul, side by side in
// one process, on the shapes diffusion models run: Y[M, N] = X[M, K] W[K, N]
// with W a constant weight, in f32 and (where the CPU has AVX512-BF16) with
// bf16 X and W, f32 sums and Y. Both get their best case: W packed once ahead
// (kiln's panels; oneDNN's preferred blocked layout through format_tag::any),
// X already bf16, the oneDNN primitive created once and only executed in the
// loop.
//
//   build/bench/kiln_bench_gemm --benchmark_min_time=0.2
//
// Each row reports GFLOP/s; compare kiln/M/N/K with onednn/M/N/K, and
// kiln_bf16 with onednn_bf16. The kiln_cold rows (two shapes) time kiln's
// products as a model runs them, W cold and, with _gelu, an activation.
#include <benchmark/benchmark.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <random>
#include <type_traits>
#include <vector>

#include "kernels/cpu/gemm.h"

namespace {

struct Shape3 {
  int64_t m, n, k;
};

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

Shape3 shape_of(const benchmark::State& state) { return {state.range(0), state.range(1), state.range(2)}; }

void report(benchmark::State& state, const Shape3& s) {
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * double(s.m * s.n * s.k), benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}

void BM_kiln(benchmark::State& state) {
  const Shape3 s = shape_of(state);
  const std::vector<float> x = random_floats(size_t(s.m * s.k), 1), w = random_floats(size_t(s.k * s.n), 2);
  std::vector<float> y(size_t(s.m * s.n));
  float* packed = static_cast<float*>(std::aligned_alloc(64, size_t(kiln::gemm::packed_floats(s.k, s.n)) * 4 + 64));
  kiln::gemm::pack(w.data(), s.n, 1, s.k, s.n, packed);
  for (auto _ : state) {
    kiln::gemm::multiply({s.m, s.n, s.k, x.data(), s.k, packed, y.data(), s.n}, {}, true);
    benchmark::DoNotOptimize(y.data());
  }
  std::free(packed);
  report(state, s);
}

void BM_kiln_bf16(benchmark::State& state) {
  const Shape3 s = shape_of(state);
  const int64_t depth = kiln::gemm::bf16_depth(s.k);
  const int64_t lda = kiln::gemm::bf16_row_stride(s.k);  // as kiln rounds a model's A
  const std::vector<float> x = random_floats(size_t(s.m * s.k), 1), w = random_floats(size_t(s.k * s.n), 2);
  std::vector<kiln::bf16> x16(size_t(s.m * lda), kiln::bf16{0});
  for (int64_t i = 0; i < s.m; ++i)
    for (int64_t t = 0; t < s.k; ++t) x16[size_t(i * lda + t)] = kiln::f32_to_bf16(x[size_t(i * s.k + t)]);
  std::vector<float> y(size_t(s.m * s.n));
  std::vector<kiln::bf16> packed(size_t(kiln::gemm::packed_bf16_count(s.k, s.n)));
  kiln::gemm::pack_bf16(w.data(), s.n, 1, s.k, s.n, packed.data());
  for (auto _ : state) {
    kiln::gemm::multiply(kiln::gemm::Bf16Problem{s.m, s.n, depth, x16.data(), lda, packed.data(), y.data(), s.n},
                         {}, true);
    benchmark::DoNotOptimize(y.data());
  }
  report(state, s);
}

// BM_kiln and BM_kiln_bf16 as a model runs them: W cold, one of enough
// packed copies to fill 64 MiB (more than an L3), as the next layer's weight
// is; with `gelu`, C through GELU-tanh, as a DiT's MLP-in is. Against the
// plain rows they show what weights from DRAM and the epilogue cost.
template <typename T>
void BM_kiln_in_model(benchmark::State& state, bool gelu) {
  constexpr bool kBf16 = std::is_same_v<T, kiln::bf16>;
  const Shape3 s = shape_of(state);
  const int64_t depth = kBf16 ? kiln::gemm::bf16_depth(s.k) : s.k;
  const std::vector<float> x = random_floats(size_t(s.m * s.k), 1), w = random_floats(size_t(s.k * s.n), 2);
  std::vector<T> a(size_t(s.m * depth), T{0});
  for (int64_t i = 0; i < s.m; ++i)
    for (int64_t t = 0; t < s.k; ++t) {
      const float v = x[size_t(i * s.k + t)];
      if constexpr (kBf16) a[size_t(i * depth + t)] = kiln::f32_to_bf16(v);
      else a[size_t(i * depth + t)] = v;
    }
  std::vector<float> y(size_t(s.m * s.n));
  // Each copy 64-byte aligned, as the panels' vector loads want.
  const size_t count = size_t(kBf16 ? kiln::gemm::packed_bf16_count(s.k, s.n) : kiln::gemm::packed_floats(s.k, s.n));
  const size_t bytes = (count * sizeof(T) + 63) / 64 * 64;
  const size_t copies = std::max<size_t>(2, (size_t(64) << 20) / bytes);
  char* packed = static_cast<char*>(std::aligned_alloc(64, bytes * copies));
  for (size_t c = 0; c < copies; ++c) {
    T* to = reinterpret_cast<T*>(packed + c * bytes);
    if constexpr (kBf16) kiln::gemm::pack_bf16(w.data(), s.n, 1, s.k, s.n, to);
    else kiln::gemm::pack(w.data(), s.n, 1, s.k, s.n, to);
  }
  kiln::gemm::Epilogue e;
  e.activate = gelu;
  e.activation = kiln::simd::UnaryF32::kGeluTanh;
  size_t next = 0;
  for (auto _ : state) {
    const T* b = reinterpret_cast<const T*>(packed + next * bytes);
    kiln::gemm::multiply(kiln::gemm::Product<T>{s.m, s.n, depth, a.data(), depth, b, y.data(), s.n}, e, true);
    next = (next + 1) % copies;
    benchmark::DoNotOptimize(y.data());
  }
  std::free(packed);
  report(state, s);
}

// oneDNN's matmul on X and W of type `dt` (f32 or bf16; f32 given, oneDNN
// converts them once ahead), Y f32.
void BM_onednn(benchmark::State& state, dnnl::memory::data_type dt) {
  using dnnl::memory;
  const Shape3 s = shape_of(state);
  std::vector<float> x = random_floats(size_t(s.m * s.k), 1), w = random_floats(size_t(s.k * s.n), 2);
  std::vector<float> y(size_t(s.m * s.n));
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  const memory::desc x_f32({s.m, s.k}, memory::data_type::f32, memory::format_tag::ab);
  const memory::desc xd({s.m, s.k}, dt, memory::format_tag::ab);
  const memory::desc wd({s.k, s.n}, memory::data_type::f32, memory::format_tag::ab);
  const memory::desc yd({s.m, s.n}, memory::data_type::f32, memory::format_tag::ab);
  const memory::desc any({s.k, s.n}, dt, memory::format_tag::any);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(xd, any, yd), engine);
  memory x_given(x_f32, engine, x.data()), w_plain(wd, engine, w.data()), y_mem(yd, engine, y.data());
  memory x_mem(xd, engine), w_packed(pd.weights_desc(), engine);
  dnnl::reorder(x_given, x_mem).execute(stream, x_given, x_mem);
  dnnl::reorder(w_plain, w_packed).execute(stream, w_plain, w_packed);
  dnnl::matmul matmul(pd);
  for (auto _ : state) {
    matmul.execute(stream, {{DNNL_ARG_SRC, x_mem}, {DNNL_ARG_WEIGHTS, w_packed}, {DNNL_ARG_DST, y_mem}});
    stream.wait();
    benchmark::DoNotOptimize(y.data());
  }
  report(state, s);
}

// M, N, K: a tiny DiT's projections (16 tokens x batch 2, hidden 64), the
// reference DiT's, a UNet block's, a small DiT's (256 tokens x 2, hidden
// 384, MLP 4x) and the medium DiT's (1024 tokens x 2, hidden 1152; its MLP's
// in and out); then an SD UNet's at 32x32 latents x batch 2 (a projection
// and GEGLU's), its keys from the text (77 tokens x 2, width 768), its 8x8
// level's projections (one; Q, K and V as one; GEGLU's in and out), its
// 16x16 level's GEGLU in, and a 3x3 conv's product at 4x4 (the batch's 32
// pixels against 1280 channels' patches); last Wan2.2 TI2V-5B's transformer
// at 17 x 256 x 256 (320 tokens x batch 2, hidden 3072: a projection, the
// FFN's in and out) and a projection at 33 x 480 x 832 (3510 tokens x 2).
// Each shape runs kiln then oneDNN, next to each other.
const Shape3 kShapes[] = {{32, 64, 64},       {32, 256, 64},      {128, 128, 128},  {256, 320, 320},
                          {512, 384, 384},    {512, 1536, 384},   {512, 384, 1536}, {2048, 1152, 1152},
                          {2048, 4608, 1152}, {2048, 1152, 4608}, {2048, 320, 320}, {2048, 2560, 320},
                          {154, 320, 768},    {128, 1280, 1280}, {128, 3840, 1280}, {128, 10240, 1280},
                          {128, 1280, 5120}, {512, 5120, 640},  {32, 1280, 11520}, {640, 3072, 3072},
                          {640, 14336, 3072}, {640, 3072, 14336}, {7020, 3072, 3072}};

}  // namespace

int main(int argc, char** argv) {
  using dt = dnnl::memory::data_type;
  auto add = [](benchmark::internal::Benchmark* b, const Shape3& s) {
    b->Args({s.m, s.n, s.k})->ArgNames({"M", "N", "K"})->UseRealTime();
  };
  for (const Shape3& s : kShapes) {
    add(benchmark::RegisterBenchmark("kiln", BM_kiln), s);
    add(benchmark::RegisterBenchmark("onednn", BM_onednn, dt::f32), s);
  }
  if (kiln::gemm::has_bf16_products()) {
    for (const Shape3& s : kShapes) {
      add(benchmark::RegisterBenchmark("kiln_bf16", BM_kiln_bf16), s);
      add(benchmark::RegisterBenchmark("onednn_bf16", BM_onednn, dt::bf16), s);
    }
  }
  // dit_small's and the medium DiT's MLP-in, as a model runs them.
  for (const Shape3& s : {Shape3{512, 1536, 384}, Shape3{2048, 4608, 1152}}) {
    add(benchmark::RegisterBenchmark("kiln_cold", BM_kiln_in_model<float>, false), s);
    add(benchmark::RegisterBenchmark("kiln_cold_gelu", BM_kiln_in_model<float>, true), s);
    if (kiln::gemm::has_bf16_products()) {
      add(benchmark::RegisterBenchmark("kiln_bf16_cold", BM_kiln_in_model<kiln::bf16>, false), s);
      add(benchmark::RegisterBenchmark("kiln_bf16_cold_gelu", BM_kiln_in_model<kiln::bf16>, true), s);
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
