// The machine's matmul peak: the GFLOP/s oneDNN's own matmul reaches on this
// CPU, with this many threads, for one dtype (f32, or bf16 with f32
// accumulation). `kiln bench` reports a model's throughput as a percentage of
// it, so "how close to the hardware" is a figure measured on the machine the
// model runs on, not a datasheet number.
//
// Measuring takes about a second per dtype, so results are cached in a JSON
// file (default_peak_cache_path()) keyed by CPU (model name, family, model
// and stepping), thread count, oneDNN version and the ISA oneDNN dispatches
// to; a changed machine or setting misses the cache and measures again.
//
//   KILN_ASSIGN_OR_RETURN(MatmulPeak peak, matmul_peak(DType::kF32, default_peak_cache_path()));
//   fmt::print("{:.0f} GFLOP/s ({})\n", peak.gflops_per_s, peak.cached ? "cached" : "measured");
#pragma once

#include <string>

#include "core/dtype.h"
#include "core/status.h"

namespace kiln {

struct MatmulPeak {
  double gflops_per_s = 0;
  bool cached = false;  // read from the cache file, not measured now
  std::string key;      // what the measurement is valid for (CPU, threads, oneDNN, ISA)
};

// $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln, then
// /matmul-peak.json; empty when none of them is set.
std::string default_peak_cache_path();

// The peak for `dtype` (kF32 or kBF16): from `cache_path` when it holds one
// for this machine, else measured and written there. An unreadable or
// malformed cache is measured over (and rewritten); a cache that cannot be
// written is not an error. An empty `cache_path` always measures.
Result<MatmulPeak> matmul_peak(DType dtype, const std::string& cache_path);

// Measures without the cache: the best GFLOP/s of a few large square and
// DiT-shaped products, each timed for at least `seconds_per_shape`.
Result<double> measure_matmul_peak(DType dtype, double seconds_per_shape = 0.25);

}  // namespace kiln
