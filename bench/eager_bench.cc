// Eager-executor time per forward on each reference model (tests/models),
// the baseline later modes are compared against side by side.
//   build/bench/kiln_bench_eager [--benchmark_filter=dit]
#include <benchmark/benchmark.h>

#include <filesystem>

#include "npy/npy.h"
#include "onnx/onnx_import.h"
#include "runtime/eager_executor.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

void BM_Eager(benchmark::State& state, const std::string& model) {
  fs::path dir = fs::path(KILN_SOURCE_DIR) / "tests" / "models" / model;
  auto graph = onnx_import_file((dir / "model.onnx").string());
  if (!graph.ok()) return state.SkipWithError(graph.status().message().c_str());
  NamedTensors inputs;
  for (const Value* v : graph->inputs()) {
    auto t = npy_read((dir / "inputs" / (v->name + ".npy")).string());
    if (!t.ok()) return state.SkipWithError(t.status().message().c_str());
    inputs.emplace_back(v->name, std::move(t).value());
  }
  EagerExecutor exec(*graph);
  for (auto _ : state) {
    auto out = exec.run(inputs);
    if (!out.ok()) return state.SkipWithError(out.status().message().c_str());
    benchmark::DoNotOptimize(out->front().raw());
  }
  state.counters["nodes"] = double(graph->nodes().size());
  state.counters["peak_MB"] = double(exec.allocator_stats().peak_live_bytes) / 1e6;
}

BENCHMARK_CAPTURE(BM_Eager, unet, std::string("unet"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Eager, vae_decoder, std::string("vae_decoder"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Eager, text_encoder, std::string("text_encoder"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Eager, dit, std::string("dit"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Eager, dit_tiny, std::string("dit_tiny"))->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace kiln

BENCHMARK_MAIN();
