// The denoise loop in each mode, side by side in one run: eager, graph (a
// host loop replaying the UNet's plan once a step) and graph-loop (the whole
// loop as one plan, one call). Each mode's pipeline is warmed up once (plans
// compiled), then the modes take turns, `reps` rounds, and the medians are
// reported with the host overhead per step (denoise time outside the model's
// kernels and compiles) and the whole generation's wall time (tokenizer, text
// encoder, denoise loop and VAE decode: what bench/compare times PyTorch and
// ONNX Runtime on). --save-latents DIR writes each mode's final latents as
// DIR/<mode>.npy, to check them against a reference. --json prints the
// medians as one JSON object instead of the table (bench/compare reads it).
//
//   build/bench/kiln_bench_pipeline [--model tests/models/tiny-sd] [--steps 20] [--reps 15]
//       [--prompt TEXT] [--seed N] [--save-latents DIR] [--json]
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "npy/npy.h"
#include "pipeline/pipeline.h"

namespace {

struct ModeRun {
  const char* name;
  kiln::PipelineOptions options;
  std::unique_ptr<kiln::Pipeline> pipe;
  std::vector<double> total, denoise, model, overhead;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

int fail(const std::string& what) {
  fmt::print(stderr, "kiln_bench_pipeline: {}\n", what);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = KILN_SOURCE_DIR "/tests/models/tiny-sd";
  std::string prompt = "a red circle on a blue background", latents_dir;
  int steps = 20, reps = 15;
  uint64_t seed = 1;
  bool json = false;
  for (int i = 1; i < argc; i += 2) {
    if (!std::strcmp(argv[i], "--json")) {
      json = true, --i;
      continue;
    }
    if (i + 1 == argc) return fail(fmt::format("{} needs a value", argv[i]));
    if (!std::strcmp(argv[i], "--model")) model = argv[i + 1];
    else if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--prompt")) prompt = argv[i + 1];
    else if (!std::strcmp(argv[i], "--seed")) seed = std::strtoull(argv[i + 1], nullptr, 10);
    else if (!std::strcmp(argv[i], "--save-latents")) latents_dir = argv[i + 1];
    else
      return fail(fmt::format("unknown flag {} (flags: --model DIR, --steps N, --reps N, --prompt TEXT, --seed N, "
                              "--save-latents DIR, --json)",
                              argv[i]));
  }
  if (steps < 1 || reps < 1) return fail("--steps and --reps must be positive");

  ModeRun modes[] = {{"eager", {.mode = kiln::ExecutionMode::kEager}},
                     {"graph", {.mode = kiln::ExecutionMode::kGraph}},
                     {"graph-loop", {.mode = kiln::ExecutionMode::kGraph, .whole_loop = true}}};
  const kiln::GenerateOptions o{.prompt = prompt, .steps = steps, .seed = seed};
  for (ModeRun& m : modes) {
    auto pipe = kiln::Pipeline::load(model, m.options);
    if (!pipe.ok()) return fail(pipe.status().message());
    m.pipe = std::move(pipe).value();
    auto warm = m.pipe->generate(o);
    if (!warm.ok()) return fail(warm.status().message());
    if (latents_dir.empty()) continue;
    const std::string path = fmt::format("{}/{}.npy", latents_dir, m.name);
    if (kiln::Status s = kiln::npy_write(path, warm->latents); !s.ok()) return fail(s.message());
  }
  for (int r = 0; r < reps; ++r)
    for (ModeRun& m : modes) {
      const auto start = std::chrono::steady_clock::now();
      auto g = m.pipe->generate(o);
      if (!g.ok()) return fail(g.status().message());
      m.total.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
      m.denoise.push_back(g->times.denoise);
      m.model.push_back(g->times.model);
      m.overhead.push_back(g->times.host_overhead_per_step(steps));
    }

  if (json) {
    nlohmann::ordered_json j = {{"model", model}, {"steps", steps}, {"rounds", reps}};
    for (const ModeRun& m : modes)
      j["modes"][m.name] = {{"denoise_ms", median(m.denoise)},
                            {"kernels_ms", median(m.model)},
                            {"host_overhead_ms_per_step", median(m.overhead)},
                            {"total_ms", median(m.total)}};
    fmt::print("{}\n", j.dump());
    return 0;
  }
  fmt::print("{}: {} steps, {} rounds, medians\n", model, steps, reps);
  fmt::print("{:<12}{:>14}{:>12}{:>16}{:>24}{:>14}{:>12}\n", "mode", "denoise ms", "ms/step", "kernels ms",
             "host overhead ms/step", "vs eager", "total ms");
  const double eager = median(modes[0].denoise);
  for (const ModeRun& m : modes)
    fmt::print("{:<12}{:>14.3f}{:>12.3f}{:>16.3f}{:>24.4f}{:>13.2f}x{:>12.3f}\n", m.name, median(m.denoise),
               median(m.denoise) / steps, median(m.model), median(m.overhead), eager / median(m.denoise),
               median(m.total));
  fmt::print("graph-loop vs graph: {:.2f}x\n", median(modes[1].denoise) / median(modes[2].denoise));
  return 0;
}
