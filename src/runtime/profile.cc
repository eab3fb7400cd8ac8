#include "runtime/profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "ir/attention_attrs.h"

namespace kiln {

namespace {

std::optional<Shape> shape_of(const Value* v) {
  return v && v->shape ? sym_shape_concrete(*v->shape) : std::nullopt;
}

int64_t last(const Shape& s, size_t from_end) { return s.size() > from_end ? s[s.size() - 1 - from_end] : 1; }

}  // namespace

int64_t node_flops(const Node& node) {
  const std::optional<Shape> y = node.outputs.empty() ? std::nullopt : shape_of(node.outputs[0]);
  const std::optional<Shape> a = shape_of(node.input(0)), b = shape_of(node.input(1));
  if (!y || !a || !b) return 0;
  const int64_t out = shape_numel(*y);
  switch (node.op) {
    case OpKind::kMatMul:
    case OpKind::kLinear: return 2 * out * last(*a, 0);
    case OpKind::kGemm: return 2 * out * (node.attrs.get_int("transA", 0) ? (*a)[0] : last(*a, 0));
    case OpKind::kConv:
    case OpKind::kFusedConv: return 2 * out * shape_numel(*b) / std::max<int64_t>(1, (*b)[0]);
    case OpKind::kConvTranspose: return 2 * shape_numel(*a) * shape_numel(*b) / std::max<int64_t>(1, (*b)[0]);
    case OpKind::kAttention: {
      // Q Kᵀ and P V: 2 Sq Sk D + 2 Sq Sk Dv per batch = 2 (|Q| + |Y|) Sk; Kᵀ's last dim is Sk. An
      // operand's slice ([axis, start, length], fuse_qkv) gives it `length` along `axis`.
      auto sliced = [&](Shape s, const char* slice) {
        const std::vector<int64_t>* at = node.attrs.get_ints(slice);
        if (at && at->size() == 3 && (*at)[0] >= 0 && size_t((*at)[0]) < s.size()) s[size_t((*at)[0])] = (*at)[2];
        return s;
      };
      using attention_attrs::kOperands;
      const Shape q = sliced(*a, kOperands[0].slice), k = sliced(*b, kOperands[1].slice);
      const std::vector<int64_t>* k_perm = node.attrs.get_ints(kOperands[1].perm);
      const int64_t sk = k_perm && k_perm->size() == k.size() ? k[size_t(k_perm->back())] : last(k, 0);
      return 2 * (shape_numel(q) + out) * sk;
    }
    default: return 0;
  }
}

std::vector<OpTotal> totals_by_op(const std::vector<StepProfile>& steps) {
  std::map<std::string, OpTotal> sums;
  for (const StepProfile& s : steps) {
    OpTotal& t = sums[std::string(op_name(s.node->op))];
    ++t.calls;
    t.ms += s.ms;
    t.flops += node_flops(*s.node);
  }
  std::vector<OpTotal> rows;
  for (auto& [op, t] : sums) {
    t.op = op;
    rows.push_back(std::move(t));
  }
  std::sort(rows.begin(), rows.end(), [](const OpTotal& a, const OpTotal& b) { return a.ms > b.ms; });
  return rows;
}

std::string report_table(const RunReport& r) {
  std::string t = fmt::format("profile ({} mode, {})\n", r.mode, r.signature);
  auto row = [&](std::string_view what, std::string value) { t += fmt::format("  {:<22}{}\n", what, value); };
  if (r.mode == "graph") {
    row("plan cache", fmt::format("{} ({} hits, {} misses)", r.plan_cache_hit ? "hit" : "miss", r.plan_hits, r.plan_misses));
    row(r.plan_cache_hit ? "load" : "compile", fmt::format("{:.3f} ms", r.compile_ms));
  }
  row("bind inputs", fmt::format("{:.3f} ms, {} bytes copied", r.bind_ms, r.input_copy_bytes));
  row("run", fmt::format("{:.3f} ms", r.run_ms));
  row("clone outputs", fmt::format("{:.3f} ms, {} bytes", r.output_clone_ms, r.output_clone_bytes));
  if (r.flops >= 0)
    row("FLOPs", fmt::format("{:.3f} G, {:.1f} GFLOP/s", double(r.flops) / 1e9,
                             r.run_ms > 0 ? double(r.flops) / (r.run_ms * 1e6) : 0.0));
  if (!r.steps.empty()) {
    double total = 0;
    for (const StepProfile& s : r.steps) total += s.ms;
    t += fmt::format("  {:<24}{:>8}{:>12}{:>8}\n", "op", "calls", "ms", "%");
    for (const OpTotal& o : totals_by_op(r.steps))
      t += fmt::format("  {:<24}{:>8}{:>12.3f}{:>8.1f}\n", o.op, o.calls, o.ms, total > 0 ? 100 * o.ms / total : 0.0);
  }
  return t;
}

nlohmann::ordered_json report_json(const RunReport& r) {
  nlohmann::ordered_json j = {{"mode", r.mode},
                              {"signature", r.signature},
                              {"plan_cache", {{"hit", r.plan_cache_hit}, {"hits", r.plan_hits}, {"misses", r.plan_misses}}},
                              {"compile_ms", r.compile_ms},
                              {"bind_ms", r.bind_ms},
                              {"input_copy_bytes", r.input_copy_bytes},
                              {"run_ms", r.run_ms},
                              {"output_clone_ms", r.output_clone_ms},
                              {"output_clone_bytes", r.output_clone_bytes}};
  if (r.flops >= 0) {
    j["flops"] = r.flops;
    j["gflops_per_s"] = r.run_ms > 0 ? double(r.flops) / (r.run_ms * 1e6) : 0.0;
  }
  if (!r.steps.empty()) {
    nlohmann::ordered_json ops = nlohmann::ordered_json::object();
    for (const OpTotal& o : totals_by_op(r.steps)) ops[o.op] = {{"calls", o.calls}, {"ms", o.ms}};
    j["ops"] = ops;
  }
  return j;
}

std::string chrome_trace(const RunReport& r) {
  nlohmann::json events = nlohmann::json::array();
  double at_us = 0;
  auto phase = [&](const char* name, double ms, nlohmann::json args = nlohmann::json::object()) {
    events.push_back({{"name", name}, {"cat", "phase"}, {"ph", "X"}, {"ts", at_us}, {"dur", ms * 1e3},
                      {"pid", 1}, {"tid", 1}, {"args", std::move(args)}});
    at_us += ms * 1e3;
  };
  phase("compile", r.compile_ms, {{"plan_cache_hit", r.plan_cache_hit}});
  phase("bind inputs", r.bind_ms, {{"bytes_copied", r.input_copy_bytes}});
  const double run_start_us = at_us;
  phase("run", r.run_ms, {{"mode", r.mode}, {"signature", r.signature}});
  for (const StepProfile& s : r.steps)
    events.push_back({{"name", op_name(s.node->op)}, {"cat", "step"}, {"ph", "X"}, {"ts", run_start_us + s.start_ms * 1e3},
                      {"dur", s.ms * 1e3}, {"pid", 1}, {"tid", 2}, {"args", {{"node", s.node->name}}}});
  phase("clone outputs", r.output_clone_ms, {{"bytes", r.output_clone_bytes}});
  return nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump();
}

}  // namespace kiln
