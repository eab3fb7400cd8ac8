// Matching for the fusion passes: small subgraphs recognized from their last
// node backwards, either by hand (producer_of, used_once, ...) or against an
// expression pattern:
//
//   // x * sigmoid(x), the operands of Mul in either order
//   const Pattern silu = op(OpKind::kMul, {capture(), op(OpKind::kSigmoid, {capture()})});
//   Match m;
//   if (match(node_output, silu, m)) { ... m.x is x, m.nodes are the nodes to replace ... }
//
// Every value inside a match other than the root and the captured x must be
// read by the match alone, so removing the matched nodes loses nothing.
#pragma once

#include <initializer_list>
#include <map>
#include <string>
#include <optional>
#include <vector>

#include "ir/graph.h"
#include "passes/pass.h"

namespace kiln {

// The nodes of these kinds, in graph order (a snapshot: a pass may then
// rewrite the graph while walking it).
std::vector<Node*> nodes_of(const Graph& graph, std::initializer_list<OpKind> ops);
// The node of kind `op` that produces v, or null.
Node* producer_of(const Value* v, OpKind op);
// Read by exactly one node and not a graph output.
bool used_once(const Value* v);
// The value of a one-element float constant.
std::optional<double> scalar_constant(const Value* v);
// A one-element float constant equal to `want` (to 1e-4 relative: exporters
// store constants such as sqrt(2) rounded to f32).
bool is_scalar(const Value* v, double want);
// A float constant every element of which equals `want`.
bool filled_with(const Value* v, double want);
// v's shape when every dim is known.
std::optional<Shape> static_shape(const Value* v);
// A new f32 constant [n] filled with `value` (a fused op's unit scale or zero bias).
Value* filled_constant(Graph& graph, std::string_view name, int64_t n, float value);

struct Pattern {
  enum class Kind { kCapture, kConstant, kAnyConstant, kOp, kEither };
  Kind kind = Kind::kCapture;
  OpKind op = OpKind::kIdentity;
  double value = 0;
  std::vector<Pattern> args;  // operands of kOp; alternatives of kEither
};
// The one input of the whole pattern: every capture() is the same value.
Pattern capture();
// A scalar constant (is_scalar).
Pattern constant(double value);
// Any scalar float constant; its value goes to Match::constants.
Pattern any_constant();
// A node of `op` with these operands (Add and Mul also match swapped).
Pattern op(OpKind op, std::vector<Pattern> args);
// The first of the alternatives that matches.
Pattern either(std::vector<Pattern> alternatives);

struct Match {
  Value* x = nullptr;            // the captured input
  std::vector<Node*> nodes;      // the matched nodes
  std::vector<double> constants; // what any_constant() matched, in match order
};
bool match(Value* root, const Pattern& pattern, Match& m);

// What can ride along inside one GEMM or convolution after it: an
// activation (kiln.Gelu, kiln.Silu, Relu), then (kiln.Linear only) a Mul by
// a gate, then a residual Add.
struct Epilogue {
  std::string activation = "none";  // kiln.Linear / kiln.Conv's attribute
  float alpha = 0;                   // swish's x sigmoid(alpha x)
  Value* gate = nullptr;             // kiln.Linear's input 4 (see match_epilogue)
  Value* residual = nullptr;
  std::vector<Node*> nodes;  // the nodes it replaces
  Value* out = nullptr;      // what the last of them writes (`from` when none)
};
// The epilogue after `from`. A gate and a residual must be computed before
// `first` in the graph's original order (`position`: node -> index, which
// the caller keeps up to date for nodes it adds), so they cannot depend on
// the fusion. With `gates`, a Mul by a value that holds one row for each
// batch entry's rows (DiT's adaLN-Zero gate, [B, 1, N] against [B, T, N];
// or [N]) is taken as a gate: x + gate * Linear(h) is then one kiln.Linear.
Epilogue match_epilogue(Value* from, const Node* first, const std::map<const Node*, size_t>& position,
                        bool gates = false);
// Activation, gate and residual attributes/inputs for an epilogue.
void set_epilogue(const Epilogue& e, Attributes& attrs, std::vector<Value*>& inputs);

// The end of every fusion pass: drops the removed nodes, restores
// topological order (a fused node sits where its first node was) and
// records the counts ("fuse_gelu" -> 7, ...).
Status finish_fusion(Graph& graph, PassStats* stats, std::initializer_list<std::pair<const char*, int64_t>> counts);

// Replaces the matched nodes by one node of `op` reading m.x (and `extra`
// inputs) that writes `root`, the value the rest of the graph reads.
void replace_match(Graph& graph, const Match& m, Value* root, OpKind op, const std::string& name,
                   Attributes attrs, std::vector<Value*> extra = {});

}  // namespace kiln
