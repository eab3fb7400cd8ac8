// The mixed-precision policy (passes/pass.h): which nodes compute in bf16.
//
// Tensors stay f32 everywhere; a node marked bf16 rounds its operands to bf16
// inside its kernel and accumulates in f32 (kernels/cpu/linalg.cc,
// kernels/cpu/conv.cc, kernels/cpu/attention_bf16.h). So norms, softmax
// statistics, the scheduler and the latents stay f32 with no Cast in the
// graph, and a policy can change per node without re-typing it.
#include <nlohmann/json.hpp>

#include "core/mapped_file.h"
#include "ir/attention_attrs.h"
#include "passes/pass.h"

namespace kiln {

namespace {

// Ops with a bf16 kernel: the products. Everything else computes in f32.
constexpr OpKind kBf16Ops[] = {OpKind::kMatMul, OpKind::kGemm,      OpKind::kConv,
                               OpKind::kLinear, OpKind::kFusedConv, OpKind::kAttention};

bool has_bf16_kernel(OpKind op) { return std::find(std::begin(kBf16Ops), std::end(kBf16Ops), op) != std::end(kBf16Ops); }

Result<DType> compute_dtype_named(const std::string& where, const nlohmann::json& v) {
  if (v.is_string()) {
    if (v.get<std::string>() == "f32") return DType::kF32;
    if (v.get<std::string>() == "bf16") return DType::kBF16;
  }
  return invalid_argument("{}: a precision is \"f32\" or \"bf16\", got {}", where, v.dump());
}

// A node matches a policy name when it is that node, a node fused from it
// (fused nodes are named after the node they replace plus a suffix, such as
// "/mlp/fc1/MatMul_linear") or a node inside it (exporters name nodes by
// module path: "/blocks.0" holds "/blocks.0/attn/MatMul").
bool name_matches(const std::string& node, const std::string& policy) {
  return node.size() >= policy.size() && node.compare(0, policy.size(), policy) == 0 &&
         (node.size() == policy.size() || node[policy.size()] == '_' || node[policy.size()] == '/');
}

}  // namespace

Result<PrecisionPolicy> parse_precision_policy(PrecisionPolicy policy, std::string_view text, std::string_view where) {
  const auto json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object())
    return invalid_argument("{}: a precision policy is a JSON object {{\"default\": ..., \"ops\": {{...}}, "
                            "\"nodes\": {{...}}}}",
                            where);
  for (const auto& [key, value] : json.items()) {
    const std::string at = fmt::format("{}: \"{}\"", where, key);
    if (key == "default") {
      KILN_ASSIGN_OR_RETURN(policy.compute, compute_dtype_named(at, value));
    } else if (key == "ops" || key == "nodes") {
      if (!value.is_object()) return invalid_argument("{} must be an object of name -> precision", at);
      for (const auto& [name, dtype_json] : value.items()) {
        KILN_ASSIGN_OR_RETURN(DType dtype, compute_dtype_named(fmt::format("{}: \"{}\"", at, name), dtype_json));
        if (key == "nodes") {
          policy.nodes[name] = dtype;
          continue;
        }
        const std::optional<OpKind> op = op_from_name(name);
        if (!op) return invalid_argument("{}: unknown op '{}'", at, name);
        if (dtype == DType::kBF16 && !has_bf16_kernel(*op))
          return invalid_argument("{}: {} has no bf16 kernel (bf16 ops: MatMul, Gemm, Conv, kiln.Linear, kiln.Conv, "
                                  "kiln.Attention)",
                                  at, name);
        policy.ops[*op] = dtype;
      }
    } else {
      return invalid_argument("{}: unknown key (default, ops, nodes)", at);
    }
  }
  return policy;
}

Result<PrecisionPolicy> precision_policy(std::string_view precision, const std::string& policy_file) {
  PrecisionPolicy policy;
  if (precision == "bf16") policy.compute = DType::kBF16;
  else if (precision != "f32") return invalid_argument("unknown precision '{}' (f32, bf16)", precision);
  if (policy_file.empty()) return policy;
  KILN_ASSIGN_OR_RETURN(std::string text, read_file(policy_file));
  return parse_precision_policy(policy, text, policy_file);
}

std::string precision_policy_json(const PrecisionPolicy& policy) {
  auto name = [](DType d) { return d == DType::kBF16 ? "bf16" : "f32"; };
  nlohmann::ordered_json j;
  j["default"] = name(policy.compute);
  j["ops"] = nlohmann::ordered_json::object();
  for (const auto& [op, dtype] : policy.ops) j["ops"][std::string(op_name(op))] = name(dtype);
  j["nodes"] = nlohmann::ordered_json::object();
  for (const auto& [node, dtype] : policy.nodes) j["nodes"][node] = name(dtype);
  return j.dump();
}

Status assign_precision(Graph& graph, const PrecisionPolicy& policy, PassStats* stats) {
  std::map<std::string, bool> node_seen;
  for (const auto& [name, dtype] : policy.nodes) node_seen[name] = false;
  for (const auto& n : graph.nodes()) {
    Node* node = n.get();
    DType dtype = policy.compute;
    if (auto it = policy.ops.find(node->op); it != policy.ops.end()) dtype = it->second;
    // The longest matching name wins: "/mlp/fc1/MatMul" over "/mlp".
    size_t matched = 0;
    for (const auto& [name, node_dtype] : policy.nodes)
      if (name_matches(node->name, name) && name.size() >= matched) {
        dtype = node_dtype;
        matched = name.size();
        node_seen[name] = true;
      }
    // A model's own request for f32 (ir/attention_attrs.h) yields only to a node entry.
    if (!matched && node->attrs.get_int(attention_attrs::kUpcast, 0)) dtype = DType::kF32;
    if (dtype != DType::kBF16 || !has_bf16_kernel(node->op)) continue;
    node->attrs.set(std::string(kComputeDtypeAttr), std::string("bf16"));
    if (stats) stats->add("assign_precision");
  }
  for (const auto& [name, seen] : node_seen)
    if (!seen) return invalid_argument("the precision policy names node '{}', which the model does not have", name);
  return ok_status();
}

bool computes_in_bf16(const Node& node) {
  const AttributeValue* v = node.attrs.find(kComputeDtypeAttr);
  const std::string* s = v ? std::get_if<std::string>(v) : nullptr;
  return s && *s == "bf16";
}

}  // namespace kiln
