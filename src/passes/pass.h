// Graph passes: each rewrites a Graph in place and counts what it changed.
//
// A pass is one file in src/passes/ with one entry point
//   Status <name>(Graph& graph, PassStats* stats);
// declared here. passes/pipeline.cc alone decides their order; any pass can
// be switched off by name (a fusion switch file, see pass_options_from_json).
//
//   PassStats stats;
//   KILN_RETURN_IF_ERROR(specialize_shapes(graph, {{"batch", 2}}));
//   KILN_RETURN_IF_ERROR(run_passes(graph, PassOptions{}, &stats));
#pragma once

#include <map>
#include <set>
#include <span>
#include <string>

#include "ir/graph.h"

namespace kiln {

struct PassStats {
  std::map<std::string, int64_t> counts;  // "<pass>" -> rewrites it made
  void add(const std::string& pass, int64_t n = 1) { counts[pass] += n; }
};

using PassFn = Status (*)(Graph&, PassStats*);

// Evaluates every node whose inputs are all constant (or whose outputs shape
// inference already knows, such as Shape of a fully known shape) and replaces
// it by constants.
Status fold_constants(Graph& graph, PassStats* stats);
// Removes nodes no graph output depends on, and unused values.
Status eliminate_dead_code(Graph& graph, PassStats* stats);
// Merges nodes that compute the same op with the same attributes on the same
// inputs.
Status eliminate_common_subexpressions(Graph& graph, PassStats* stats);

// LayerNorm decomposed by the exporter (ReduceMean, Sub, Pow, ReduceMean,
// Add, Sqrt, Div, optional Mul/Add affine) -> one LayerNormalization.
Status fuse_layer_norm(Graph& graph, PassStats* stats);
// LayerNorm without affine, then x * m + shift with per-sample [B, 1, C]
// m and shift (DiT's adaLN) -> kiln.ModulatedLayerNorm.
Status fuse_adaln(Graph& graph, PassStats* stats);
// GELU in its exact (erf), tanh and sigmoid (QuickGELU) forms -> kiln.Gelu.
Status fuse_gelu(Graph& graph, PassStats* stats);
// Slice halves of a projection, GELU of one times the other -> kiln.Geglu.
Status fuse_geglu(Graph& graph, PassStats* stats);
// x sigmoid(x) and x sigmoid(a x) -> kiln.Silu.
Status fuse_silu(Graph& graph, PassStats* stats);
// Reshape, InstanceNormalization, Reshape, optional affine (and a SiLU that
// follows) -> kiln.GroupNorm.
Status fuse_group_norm(Graph& graph, PassStats* stats);
// MatMul(Q, Kt), scale, optional mask, Softmax, MatMul(P, V) and the
// Transposes around them -> kiln.Attention.
Status fuse_attention(Graph& graph, PassStats* stats);
// MatMul by a constant weight, bias Add, optional activation and residual
// Add -> kiln.Linear (one GEMM with an epilogue).
Status fuse_linear(Graph& graph, PassStats* stats);
// Two or three of an attention's Q, K and V projections of one tensor ->
// one projection whose slices it reads.
Status fuse_qkv(Graph& graph, PassStats* stats);
// Conv, then an activation -> kiln.Conv (the GEMM's epilogue).
Status fuse_conv(Graph& graph, PassStats* stats);
// 3x3 convolutions with stride 1 marked winograd = 1: the CPU kernel may run
// them by Winograd's F(2x2, 3x3).
Status winograd_conv(Graph& graph, PassStats* stats);

// Not a pipeline pass, since it takes the signature: fixes symbolic input
// dims to concrete sizes and re-infers every shape, so later passes can fold
// the shape arithmetic exported models carry.
Status specialize_shapes(Graph& graph, const std::map<std::string, int64_t>& dims);

struct PassInfo {
  const char* name;
  PassFn fn;
  bool after_precision = false;  // runs once assign_precision has marked the nodes
};
// The passes in the order they run.
std::span<const PassInfo> pass_pipeline();

// Which nodes compute in bf16 (matmul, convolution and attention with f32
// accumulation; tensors stay f32): `compute` for every op that has a bf16
// kernel, unless `ops` (by op) or `nodes` (by node name) says otherwise.
struct PrecisionPolicy {
  DType compute = DType::kF32;
  std::map<OpKind, DType> ops;
  std::map<std::string, DType> nodes;  // also matches nodes fused from it or inside it ("/blocks.0")
};
// `precision` ("f32" or "bf16") as the default, overridden by a JSON file
// (when `policy_file` is not empty) of the form
//   {"default": "bf16", "ops": {"Conv": "f32"}, "nodes": {"/blocks.0/attn": "f32"}}
Result<PrecisionPolicy> precision_policy(std::string_view precision, const std::string& policy_file);
// `base` overridden by a policy's JSON text (`where` names it in errors).
Result<PrecisionPolicy> parse_precision_policy(PrecisionPolicy base, std::string_view text, std::string_view where);
// The whole policy in that JSON form ("default", "ops" and "nodes" always
// present), which parse_precision_policy reads back to the same policy.
std::string precision_policy_json(const PrecisionPolicy& policy);

// Marks each node the policy computes in bf16 (attribute kComputeDtypeAttr).
// Runs last in run_passes, so fused nodes are marked; eager execution calls
// it on the unfused graph. A policy naming a node the graph lacks is an error.
inline constexpr std::string_view kComputeDtypeAttr = "compute_dtype";
Status assign_precision(Graph& graph, const PrecisionPolicy& policy, PassStats* stats);
// True when `node` is marked to compute in bf16 (allocates nothing).
bool computes_in_bf16(const Node& node);

struct PassOptions {
  std::set<std::string> disabled;  // pass names switched off
  PrecisionPolicy precision;
};
// A fusion switch file: a JSON object {"<pass name>": true|false, ...};
// unknown names are an error so a typo cannot silently leave a pass on.
Result<PassOptions> pass_options_from_json(const std::string& path);

// Runs the pipeline, then checks the graph (graph_verify).
Status run_passes(Graph& graph, const PassOptions& options, PassStats* stats);

}  // namespace kiln
