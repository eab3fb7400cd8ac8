// Q, K and V projection fusion. An attention's operands are usually
// projections of one tensor, each split into heads:
//
//   q = Reshape(Linear(x, Wq, bq), [..., H, D])    likewise k and v, each a
//   kiln.Attention(q, k, v)                         kiln.Linear or a MatMul
//                                                   by a constant weight
//
// Two or three that read the same x become one projection with the weights
// side by side, reshaped to [..., g H, D]; the attention reads each operand
// as its slice of those heads (attribute q_slice = [axis, start, length],
// likewise k_slice and v_slice). One GEMM instead of g: x is read (in bf16,
// rounded) once, and its columns split across threads in one region instead
// of g. Self-attention merges Q, K and V; cross-attention K and V.
//
// It runs after assign_precision (pipeline.cc): projections a precision
// policy gives different dtypes stay apart, and the policy's node names are
// matched before they merge.
#include <cstring>

#include "core/mapped_file.h"
#include "ir/attention_attrs.h"
#include "passes/match.h"
#include "passes/pass.h"

namespace kiln {

namespace {

// An attention operand made by a projection and a head split.
struct HeadSplit {
  size_t operand = 0;          // 0 Q, 1 K, 2 V
  Node* projection = nullptr;  // kiln.Linear with its bias alone, or a MatMul by a constant [K, N]
  Node* reshape = nullptr;
  Shape heads;  // the Reshape's output: [..., H, D]
};

bool plain_projection(const Node* n) {
  if (!n || (n->op != OpKind::kLinear && n->op != OpKind::kMatMul) || n->inputs.size() < 2) return false;
  const Value* w = n->inputs[1];
  if (!w->constant || w->constant->rank() != 2) return false;
  if (n->op == OpKind::kMatMul) return w->dtype == DType::kF32;
  // A Linear's weight may be stored in half precision (kernel.h); its bias, if any, is f32.
  const Value* bias = n->input(2);
  return n->inputs.size() <= 3 && (!bias || bias->constant) && n->attrs.get_string("activation", "none") == "none";
}

bool has_bias(const Node& n) { return n.input(2) != nullptr; }
bool weight_transposed(const Node& n) { return n.attrs.get_int("transB", 0) != 0; }

std::optional<HeadSplit> head_split(const Node& attention, size_t operand) {
  Value* heads = attention.inputs[operand];
  Node* reshape = producer_of(heads, OpKind::kReshape);
  if (!reshape || !used_once(heads) || attention.attrs.has(attention_attrs::kOperands[operand].slice))
    return std::nullopt;
  Value* projected = reshape->inputs[0];
  Node* projection = projected->producer;
  if (!plain_projection(projection) || !used_once(projected)) return std::nullopt;
  const std::optional<Shape> y = static_shape(projected), h = static_shape(heads);
  const std::optional<Shape> x = static_shape(projection->inputs[0]);
  // [lead..., N] -> [lead..., H, D], with x [lead..., K] (a MatMul does not broadcast it)
  if (!y || !h || !x || h->size() != y->size() + 1 || x->size() != y->size() ||
      !std::equal(y->begin(), y->end() - 1, h->begin()) || !std::equal(y->begin(), y->end() - 1, x->begin()) ||
      h->end()[-2] * h->end()[-1] != y->back())
    return std::nullopt;
  return HeadSplit{operand, projection, reshape, *h};
}

// Whether b can share a's GEMM: the same input, op, precision and head split.
bool mergeable(const HeadSplit& a, const HeadSplit& b) {
  const Node &pa = *a.projection, &pb = *b.projection;
  return pa.inputs[0] == pb.inputs[0] && pa.op == pb.op && computes_in_bf16(pa) == computes_in_bf16(pb) &&
         a.heads == b.heads && pa.inputs[1]->dtype == pb.inputs[1]->dtype &&
         weight_transposed(pa) == weight_transposed(pb) && has_bias(pa) == has_bias(pb);
}

// The constants of input `i` of every projection, concatenated along N:
// weights [K, N] -> [K, g N] (transB: [N, K] -> [g N, K]), biases [N] -> [g N].
Result<Tensor> side_by_side(const std::vector<HeadSplit>& group, size_t i) {
  const Tensor& first = *group[0].projection->inputs[i]->constant;
  const bool by_rows = i == 1 && weight_transposed(*group[0].projection);  // N is the first axis
  const int64_t g = int64_t(group.size());
  const int64_t cols = by_rows ? first.numel() : first.shape().back(), rows = first.numel() / cols;
  Shape shape = first.shape();
  (by_rows ? shape.front() : shape.back()) *= g;
  const size_t row_bytes = size_t(cols) * dtype_size(first.dtype());
  KILN_ASSIGN_OR_RETURN(Tensor merged, Tensor::empty(first.dtype(), shape));
  for (int64_t m = 0; m < g; ++m) {
    const Tensor& part = *group[size_t(m)].projection->inputs[i]->constant;
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(static_cast<std::byte*>(merged.raw()) + size_t(r * g + m) * row_bytes,
                  static_cast<const std::byte*>(part.raw()) + size_t(r) * row_bytes, row_bytes);
    // Read once: a mapped weight's pages need not stay resident beside the copy.
    MappedFile::drop_resident_pages(part.view().data, part.nbytes());
  }
  return merged;
}

Value* new_value(Graph& graph, const std::string& name, const Shape& shape) {
  Value* v = graph.add_value(graph.unique_name(name));
  v->dtype = DType::kF32;
  v->shape = sym_shape_from(shape);
  return v;
}

// Replaces the group's projections and Reshapes by one of each, and points
// the attention's operands at their slices.
Status merge(Graph& graph, Node& attention, const std::vector<HeadSplit>& group) {
  const Node& first = *group[0].projection;
  std::string name = first.name + "_";
  for (const HeadSplit& s : group) name += "qkv"[s.operand];  // "..._qkv", "..._kv"
  std::vector<Value*> inputs = {first.inputs[0]};
  for (size_t i = 1; i < first.inputs.size(); ++i) {  // the weight, and a Linear's bias
    if (!first.inputs[i]) {
      inputs.push_back(nullptr);
      continue;
    }
    KILN_ASSIGN_OR_RETURN(Tensor merged, side_by_side(group, i));
    inputs.push_back(graph.add_constant(graph.unique_name(name + (i == 1 ? "_weight" : "_bias")), std::move(merged)));
  }
  const int64_t g = int64_t(group.size());
  Shape projected = *static_shape(first.outputs[0]);
  projected.back() *= g;
  Shape heads = group[0].heads;
  const int64_t h = heads.end()[-2];
  heads.end()[-2] *= g;
  Value* y = new_value(graph, name, projected);
  Value* split = new_value(graph, name + "_heads", heads);
  graph.add_node(first.op, name, std::move(inputs), {y}, first.attrs);
  Value* shape = graph.add_constant(graph.unique_name(name + "_shape"),
                                    *Tensor::from_vector<int64_t>({int64_t(heads.size())}, heads));
  graph.add_node(OpKind::kReshape, name + "_heads", {y, shape}, {split});
  const int64_t axis = int64_t(heads.size()) - 2;
  for (int64_t m = 0; m < g; ++m) {
    const HeadSplit& s = group[size_t(m)];
    graph.replace_all_uses(attention.inputs[s.operand], split);
    graph.remove_node(s.reshape);
    graph.remove_node(s.projection);
    attention.attrs.set(attention_attrs::kOperands[s.operand].slice, std::vector<int64_t>{axis, m * h, h});
  }
  return ok_status();
}

}  // namespace

Status fuse_qkv(Graph& graph, PassStats* stats) {
  int64_t merged = 0, projections = 0;
  for (Node* attention : nodes_of(graph, {OpKind::kAttention})) {
    std::vector<HeadSplit> splits;
    for (size_t i = 0; i < 3; ++i)
      if (auto s = head_split(*attention, i)) splits.push_back(*s);
    // Groups in operand order: Q with whichever of K and V matches it, then K with V.
    std::vector<bool> taken(splits.size());
    for (size_t lead = 0; lead < splits.size(); ++lead) {
      std::vector<HeadSplit> group = {splits[lead]};
      for (size_t j = lead + 1; j < splits.size(); ++j)
        if (!taken[lead] && !taken[j] && mergeable(splits[lead], splits[j])) {
          group.push_back(splits[j]);
          taken[j] = true;
        }
      if (group.size() < 2) continue;
      KILN_RETURN_IF_ERROR(merge(graph, *attention, group));
      ++merged;
      projections += int64_t(group.size());
    }
  }
  return finish_fusion(graph, stats, {{"fuse_qkv", merged}, {"fuse_qkv_projections", projections}});
}

}  // namespace kiln
