// Measured matmul peak (see matmul_peak.h): oneDNN matmuls with the weights
// pre-packed in the layout the primitive prefers (as a compiled plan packs
// them), timed on a few shapes; the best rate is the peak.
#include "kernels/cpu/matmul_peak.h"

#include <omp.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <tuple>
#include <unordered_map>
#include <unistd.h>

namespace kiln {

namespace {

// A cache file is a few hundred bytes; anything far larger is not ours.
constexpr uintmax_t kMaxCacheBytes = 1 << 20;

// The CPU as /proc/cpuinfo names its first processor: the model name, and
// the family, model and stepping, which tell apart CPUs a VM names alike
// ("AMD EPYC" for a Zen 4 and a Zen 5 host, whose peaks differ:
// docs/performance.md#machines).
std::string cpu_identity() {
  std::ifstream in("/proc/cpuinfo");
  std::unordered_map<std::string, std::string> fields;
  for (std::string line; std::getline(in, line) && !line.empty();) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    key.erase(key.find_last_not_of(" \t") + 1);  // "model\t\t: 2" is "model"
    fields.emplace(std::move(key), line.substr(std::min(colon + 2, line.size())));
  }
  auto field = [&](const char* key) {
    const auto it = fields.find(key);
    return it == fields.end() ? std::string("?") : it->second;
  };
  if (fields.empty()) return "unknown CPU";
  return fmt::format("{} (family {} model {} stepping {})", field("model name"), field("cpu family"), field("model"),
                     field("stepping"));
}

std::string machine_key() {
  const dnnl_version_t* v = dnnl_version();
  return fmt::format("{} | {} threads | oneDNN {}.{}.{} | isa {}", cpu_identity(), omp_get_max_threads(),
                     v->major, v->minor, v->patch, int(dnnl::get_effective_cpu_isa()));
}

// GFLOP/s of Y[m, n] = X[m, k] W[k, n] in `dt` (f32 output), best per-run time
// over at least `seconds` of runs.
double time_matmul(const dnnl::engine& engine, dnnl::stream& stream, dnnl::memory::data_type dt, int64_t m,
                   int64_t n, int64_t k, double seconds) {
  using dnnl::memory;
  const memory::desc x({m, k}, dt, memory::format_tag::ab);
  const memory::desc w({k, n}, dt, memory::format_tag::any);
  const memory::desc y({m, n}, memory::data_type::f32, memory::format_tag::ab);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(x, w, y), engine);
  memory xm(x, engine), wm(pd.weights_desc(), engine), ym(y, engine);
  // Small values in every operand: no denormals, no special cases.
  for (memory* mem : {&xm, &wm}) std::memset(mem->get_data_handle(), 0x3c, mem->get_desc().get_size());
  dnnl::matmul matmul(pd);
  const std::unordered_map<int, memory> args{{DNNL_ARG_SRC, xm}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, ym}};
  auto run = [&] {
    const auto start = std::chrono::steady_clock::now();
    matmul.execute(stream, args);
    stream.wait();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  run();  // warm-up: first-touch pages, JIT kernels
  double best = 1e30, total = 0;
  for (int runs = 0; total < seconds || runs < 3; ++runs) {
    const double t = run();
    best = std::min(best, t);
    total += t;
  }
  return 2.0 * double(m) * double(n) * double(k) / best / 1e9;
}

Result<nlohmann::json> read_cache(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return nlohmann::json::object();
  if (std::filesystem::file_size(path, ec) > kMaxCacheBytes || ec)
    return invalid_argument("{}: not a matmul peak cache", path);
  std::ifstream in(path);
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return invalid_argument("{}: not a matmul peak cache", path);
  return j;
}

void write_cache(const std::string& path, const nlohmann::json& j) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  // Written aside and renamed: a concurrent reader never sees half a file.
  const std::string tmp = fmt::format("{}.{}.tmp", path, getpid());
  {
    std::ofstream out(tmp);
    out << j.dump(2) << "\n";
    if (!out) return;
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) std::filesystem::remove(tmp, ec);
}

}  // namespace

std::string default_peak_cache_path() {
  std::string dir;
  if (const char* d = std::getenv("KILN_CACHE_DIR"); d && *d) dir = d;
  else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) dir = std::string(x) + "/kiln";
  else if (const char* h = std::getenv("HOME"); h && *h) dir = std::string(h) + "/.cache/kiln";
  return dir.empty() ? "" : dir + "/matmul-peak.json";
}

Result<double> measure_matmul_peak(DType dtype, double seconds_per_shape) {
  if (dtype != DType::kF32 && dtype != DType::kBF16)
    return unsupported("no matmul peak for dtype {}", dtype_name(dtype));
  const auto dt = dtype == DType::kF32 ? dnnl::memory::data_type::f32 : dnnl::memory::data_type::bf16;
  try {
    dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    dnnl::stream stream(engine);
    // A square product and a DiT MLP's (tokens x hidden -> 4 x hidden): the
    // best of the two, as the shapes a model runs favour one or the other.
    double best = 0;
    for (const auto& [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1024, 1024, 1024}, {2048, 1536, 384}})
      best = std::max(best, time_matmul(engine, stream, dt, m, n, k, seconds_per_shape));
    return best;
  } catch (const dnnl::error& e) {
    if (e.status == dnnl_unimplemented) return unsupported("oneDNN has no {} matmul on this CPU", dtype_name(dtype));
    return internal_error("measuring the {} matmul peak: oneDNN: {}", dtype_name(dtype), e.what());
  }
}

Result<MatmulPeak> matmul_peak(DType dtype, const std::string& cache_path) {
  MatmulPeak peak;
  peak.key = machine_key();
  const std::string name(dtype_name(dtype));
  nlohmann::json cache = nlohmann::json::object();
  if (!cache_path.empty()) {
    if (auto read = read_cache(cache_path); read.ok()) cache = *std::move(read);
    const nlohmann::json* entry = cache.contains(peak.key) ? &cache[peak.key] : nullptr;
    if (entry && entry->is_object() && entry->contains(name) && (*entry)[name].is_number() &&
        (*entry)[name].get<double>() > 0) {
      peak.gflops_per_s = (*entry)[name].get<double>();
      peak.cached = true;
      return peak;
    }
  }
  KILN_ASSIGN_OR_RETURN(peak.gflops_per_s, measure_matmul_peak(dtype));
  if (!cache_path.empty()) {
    if (!cache[peak.key].is_object()) cache[peak.key] = nlohmann::json::object();
    cache[peak.key][name] = peak.gflops_per_s;
    write_cache(cache_path, cache);
  }
  return peak;
}

}  // namespace kiln
