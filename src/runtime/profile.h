// Where a run's time went (`--profile`): compile, plan-cache hit or miss,
// input binding, the run itself, output copies, optionally every step; as a
// text table, as JSON, and as a Chrome trace (chrome://tracing, Perfetto).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/plan.h"

namespace kiln {

// 2 x the multiply-adds of a MatMul, Gemm, Conv, ConvTranspose, kiln.Linear,
// kiln.Conv or kiln.Attention node with static shapes; 0 for other ops (memory-bound:
// their cost is bytes, not FLOPs) and for unknown shapes.
int64_t node_flops(const Node& node);

// Steps summed per op kind (calls, ms, and FLOPs by node_flops), slowest first.
struct OpTotal {
  std::string op;
  int64_t calls = 0;
  double ms = 0;
  int64_t flops = 0;
};
std::vector<OpTotal> totals_by_op(const std::vector<StepProfile>& steps);

struct RunReport {
  std::string mode;            // "eager" or "graph" (what auto chose)
  std::string signature;
  bool plan_cache_hit = false; // graph mode: the plan was compiled by an earlier call
  int64_t plan_hits = 0, plan_misses = 0;
  double compile_ms = 0;       // this call's compile (0 on a hit)
  double bind_ms = 0;
  size_t input_copy_bytes = 0; // inputs are bound by pointer: 0
  double run_ms = 0;
  double output_clone_ms = 0;
  size_t output_clone_bytes = 0;
  int64_t flops = -1;          // per run; -1 when unknown (eager)
  std::vector<StepProfile> steps;  // per step, when asked for
};

std::string report_table(const RunReport& r);
nlohmann::ordered_json report_json(const RunReport& r);
// Chrome trace event JSON: one complete event per phase and per step.
std::string chrome_trace(const RunReport& r);

}  // namespace kiln
