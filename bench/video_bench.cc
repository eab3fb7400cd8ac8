// A Wan folder's video pipeline, the denoise loop's modes side by side in one
// run: eager (node by node), graph (a host loop replaying the transformer's
// plan) and graph-loop (the whole loop as one plan). Modes take turns,
// `reps` rounds, each round loading its own pipeline (one network in memory
// at a time, as `kiln generate` does). A step's time is the steady one: from
// the first step's end to the last's, over steps - 1 (the first step packs
// the weights). Also printed: the text encoder's time, the loop plan's heap
// allocations and copies, and the process's peak resident memory.
//
// --decode-only times the VAE decoder alone on random latents of the size
// asked for, streamed a latent frame per call as the pipeline does; run it
// in processes of their own at several frame counts to see its peak memory
// stay put (bench/results.md).
//
//   build/bench/kiln_bench_video --model DIR [--frames 17] [--width 256] [--height 256] [--steps 3]
//       [--reps 1] [--modes eager,graph,graph-loop] [--precision f32|bf16] [--decode-only] [--json]
#include <fmt/format.h>
#include <sys/resource.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/rng.h"
#include "passes/pass.h"
#include "models/wan_model.h"
#include "pipeline/video_decoder.h"
#include "pipeline/video_pipeline.h"

namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return double(usage.ru_maxrss) / 1024.0;  // Linux reports KiB
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

int fail(const std::string& what) {
  fmt::print(stderr, "kiln_bench_video: {}\n", what);
  return 2;
}

struct Settings {
  std::string model, prompt = "A red fox runs through fresh snow in a quiet forest at dawn.";
  std::string precision = "f32", modes = "eager,graph-loop";
  int64_t frames = 17, width = 256, height = 256;
  int steps = 3, reps = 1;
  bool decode_only = false, json = false;
};

struct ModeRun {
  std::string name;
  std::vector<double> step_ms, text_encoder_ms, compile_ms;
  int64_t heap_allocations = -1;
  size_t output_copy_bytes = 0;
};

kiln::Result<kiln::VideoPipelineOptions> options_for(const std::string& mode, const std::string& precision) {
  kiln::VideoPipelineOptions o;
  KILN_ASSIGN_OR_RETURN(o.passes.precision, kiln::precision_policy(precision, ""));
  o.whole_loop = mode == "graph-loop";
  if (mode == "eager") o.mode = kiln::ExecutionMode::kEager;
  else if (mode == "graph" || mode == "graph-loop") o.mode = kiln::ExecutionMode::kGraph;
  else return kiln::invalid_argument("--modes: eager, graph or graph-loop, not '{}'", mode);
  return o;
}

// One generation's loop in `run`'s mode, no decode.
kiln::Status time_mode(const Settings& s, ModeRun& run) {
  KILN_ASSIGN_OR_RETURN(kiln::VideoPipelineOptions options, options_for(run.name, s.precision));
  KILN_ASSIGN_OR_RETURN(auto pipe, kiln::VideoPipeline::load(s.model, options));
  std::vector<Clock::time_point> ends;
  ends.reserve(size_t(s.steps));  // the callback must not allocate inside the loop plan's run
  kiln::VideoRequest r{
      .prompt = s.prompt, .seed = 1, .steps = s.steps, .frames = s.frames, .width = s.width, .height = s.height};
  r.on_step = [&](int, int) { ends.push_back(Clock::now()); };
  KILN_ASSIGN_OR_RETURN(kiln::VideoGeneration g, pipe->generate(r, {}));
  run.step_ms.push_back(ms_between(ends.front(), ends.back()) / double(s.steps - 1));
  run.text_encoder_ms.push_back(g.times.text_encoder);
  run.compile_ms.push_back(g.times.compile);
  run.heap_allocations = g.loop_heap_allocations;
  run.output_copy_bytes = g.loop_output_copy_bytes;
  fmt::print(stderr, "kiln_bench_video: {} {:.0f} ms a step\n", run.name, run.step_ms.back());
  return kiln::ok_status();
}

kiln::Status decode_only(const Settings& s, nlohmann::ordered_json& j) {
  KILN_ASSIGN_OR_RETURN(kiln::WanFolder folder, kiln::wan_folder_open(s.model, ""));
  const auto load_start = Clock::now();
  KILN_ASSIGN_OR_RETURN(auto vae, kiln::wan_load_vae(folder));
  const int64_t h = s.height / 16, w = s.width / 16, latent_frames = (s.frames - 1) / 4 + 1;
  KILN_ASSIGN_OR_RETURN(kiln::VideoPipelineOptions options, options_for("graph", s.precision));
  KILN_ASSIGN_OR_RETURN(auto decoder, kiln::VideoDecoder::create(vae->config, vae->weights, h, w,
                                                                 {.mode = options.mode, .passes = options.passes}));
  KILN_ASSIGN_OR_RETURN(kiln::Tensor latents,
                        kiln::Tensor::empty(kiln::DType::kF32, {1, vae->config.z_dim, latent_frames, h, w}));
  kiln::NoiseStream(1, 0).fill(latents.data<float>(), size_t(latents.numel()));
  int64_t frames = 0;
  const auto start = Clock::now();
  KILN_RETURN_IF_ERROR(decoder->decode(latents, [&](const kiln::TensorView& f) {
    frames += f.shape[2];
    return kiln::ok_status();
  }));
  const auto end = Clock::now();
  if (frames != s.frames) return kiln::internal_error("decoded {} frames, wanted {}", frames, s.frames);
  j["vae_decode_ms"] = ms_between(start, end);
  j["vae_load_and_compile_ms"] = ms_between(load_start, start);
  return kiln::ok_status();
}

}  // namespace

int main(int argc, char** argv) {
  Settings s;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--json" || flag == "--decode-only") {
      (flag == "--json" ? s.json : s.decode_only) = true;
      continue;
    }
    if (i + 1 == argc) return fail(fmt::format("{} needs a value", flag));
    const std::string value = argv[++i];
    auto number = [&](auto& out) {
      char* end = nullptr;
      const long long v = std::strtoll(value.c_str(), &end, 10);
      if (end == value.c_str() || *end || v < 1) return false;
      out = static_cast<std::remove_reference_t<decltype(out)>>(v);
      return true;
    };
    bool ok = true;
    if (flag == "--model") s.model = value;
    else if (flag == "--prompt") s.prompt = value;
    else if (flag == "--precision") s.precision = value;
    else if (flag == "--modes") s.modes = value;
    else if (flag == "--frames") ok = number(s.frames);
    else if (flag == "--width") ok = number(s.width);
    else if (flag == "--height") ok = number(s.height);
    else if (flag == "--steps") ok = number(s.steps);
    else if (flag == "--reps") ok = number(s.reps);
    else return fail(fmt::format("unknown flag {}", flag));
    if (!ok) return fail(fmt::format("{} needs a positive whole number, got '{}'", flag, value));
  }
  if (s.model.empty()) return fail("--model DIR (a Wan folder) is required");
  if (s.steps < 2) return fail("--steps must be at least 2: a step's time is taken after the first");

  nlohmann::ordered_json j;
  j["model"] = s.model;
  j["precision"] = s.precision;
  j["frames"] = s.frames, j["width"] = s.width, j["height"] = s.height;
  if (s.decode_only) {
    if (kiln::Status st = decode_only(s, j); !st.ok()) return fail(st.message());
  } else {
    std::vector<ModeRun> runs;
    for (size_t at = 0; at <= s.modes.size();) {
      const size_t comma = std::min(s.modes.find(',', at), s.modes.size());
      runs.push_back({.name = s.modes.substr(at, comma - at)});
      at = comma + 1;
    }
    for (int rep = 0; rep < s.reps; ++rep)
      for (ModeRun& run : runs)
        if (kiln::Status st = time_mode(s, run); !st.ok()) return fail(fmt::format("{}: {}", run.name, st.message()));
    j["steps"] = s.steps, j["reps"] = s.reps;
    for (const ModeRun& run : runs) {
      auto& m = j["modes"][run.name];
      m["step_ms_median"] = median(run.step_ms);
      m["step_ms"] = run.step_ms;
      m["text_encoder_ms_median"] = median(run.text_encoder_ms);
      m["compile_ms_median"] = median(run.compile_ms);
      if (run.name == "graph-loop") {
        m["replay_heap_allocations"] =
            run.heap_allocations < 0 ? nlohmann::json() : nlohmann::json(run.heap_allocations);
        m["input_copy_bytes"] = 0;  // every input bound by pointer: Plan has no copy path for them
        m["output_clone_bytes"] = run.output_copy_bytes;
      }
    }
    for (const ModeRun& run : runs)
      if (run.name != "eager" && j["modes"].contains("eager"))
        j["speedup_vs_eager"][run.name] =
            median(j["modes"]["eager"]["step_ms"].get<std::vector<double>>()) / median(run.step_ms);
  }
  j["peak_rss_mib"] = peak_rss_mib();
  if (s.json) {
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  fmt::print("{} in {}: {} frames of {}x{}\n", s.model, s.precision, s.frames, s.width, s.height);
  if (s.decode_only) {
    fmt::print("vae decode {:.0f} ms (load and compile {:.0f} ms)\n", j["vae_decode_ms"].get<double>(),
               j["vae_load_and_compile_ms"].get<double>());
  } else {
    for (const auto& [name, m] : j["modes"].items()) {
      fmt::print("{:<11} {:10.1f} ms a step   text encoder {:8.1f} ms", name, m["step_ms_median"].get<double>(),
                 m["text_encoder_ms_median"].get<double>());
      if (j.contains("speedup_vs_eager") && j["speedup_vs_eager"].contains(name))
        fmt::print("   {:.2f}x eager", j["speedup_vs_eager"][name].get<double>());
      if (m.contains("replay_heap_allocations"))
        fmt::print("   allocations {}, input copies {} B, output clones {} B", m["replay_heap_allocations"].dump(),
                   m["input_copy_bytes"].dump(), m["output_clone_bytes"].dump());
      fmt::print("\n");
    }
  }
  fmt::print("peak resident memory {:.0f} MiB\n", j["peak_rss_mib"].get<double>());
  return 0;
}
