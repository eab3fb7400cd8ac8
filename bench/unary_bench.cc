// kiln's f32 activations (kernels/cpu/elementwise_simd.h) over 4096 floats
// in L1 on one thread: the cost of a GEMM epilogue's activation per output,
// which runs between the tiles' products and so adds to them.
//
//   build/bench/kiln_bench_unary --benchmark_min_time=0.2
//
// Each row reports ns per 16 floats (one AVX-512 vector).
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "kernels/cpu/elementwise_simd.h"

namespace {

using kiln::simd::UnaryF32;

void BM_unary(benchmark::State& state, UnaryF32 op, float alpha) {
  constexpr size_t kFloats = 4096;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);  // where activations' inputs lie
  std::vector<float> x(kFloats), y(kFloats);
  for (float& v : x) v = dist(rng);
  kiln::simd::UnaryF32Params params;
  params.alpha = alpha;
  for (auto _ : state) {
    kiln::simd::unary_f32(op, x.data(), y.data(), kFloats, params);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["ns/16"] = benchmark::Counter(double(kFloats / 16), benchmark::Counter::kIsIterationInvariantRate |
                                                                          benchmark::Counter::kInvert);
}

}  // namespace

int main(int argc, char** argv) {
  const struct {
    const char* name;
    UnaryF32 op;
    float alpha;
  } ops[] = {{"gelu", UnaryF32::kGelu, 0.0f},
             {"gelu_tanh", UnaryF32::kGeluTanh, 0.0f},
             {"silu", UnaryF32::kSilu, 1.0f},
             {"sigmoid", UnaryF32::kSigmoid, 0.0f},
             {"exp", UnaryF32::kExp, 0.0f}};
  for (const auto& o : ops) benchmark::RegisterBenchmark(o.name, BM_unary, o.op, o.alpha);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
