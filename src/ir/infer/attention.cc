// Shape inference for kiln.Attention (see ir/shape_inference.h).
//
// Q, K and V are read through their perms (identity when absent), each
// after its slice when it has one (q_slice = [axis, start, length]: Q's dim
// `axis` cut to [start, start + length), fuse_qkv's operands that share one
// projection; likewise k_slice and v_slice), as
//   Qh = [batch..., Sq, D], Kt = [batch..., D, Sk], Vh = [batch..., Sk, Dv],
// the Mask broadcasts to the scores [batch..., Sq, Sk], and
// Y = Transpose([batch..., Sq, Dv], out_perm). The fusion pass builds these
// nodes, so every mismatch is reported: a pass bug would otherwise surface as
// a wrong answer.
#include <fmt/ranges.h>

#include <array>
#include <numeric>
#include <string_view>

#include "ir/attention_attrs.h"
#include "ir/infer/infer_util.h"

namespace kiln {

namespace {

using attention_attrs::kOperands;
constexpr size_t kMaskInput = 3;

// The rank Q, K and V share, or the perms' length when no shape is known;
// nullopt when nothing tells.
Result<std::optional<size_t>> operand_rank(const InferContext& ctx) {
  std::optional<size_t> rank;
  std::string_view from;
  for (size_t i = 0; i < kOperands.size(); ++i) {
    const auto& s = ctx.input(i).shape;
    if (!s) continue;
    if (rank && *rank != s->size())
      return ctx.error("{} has rank {} but {} has rank {}", kOperands[i].name, s->size(), from, *rank);
    rank = s->size();
    from = kOperands[i].name;
  }
  for (std::string_view attr : {kOperands[0].perm, kOperands[1].perm, kOperands[2].perm, attention_attrs::kOutPerm})
    if (const auto* perm = ctx.attrs().get_ints(attr); perm && !rank) rank = perm->size();
  if (rank && *rank != 3 && *rank != 4) return ctx.error("Q, K and V must have rank 3 or 4, not {}", *rank);
  return rank;
}

// Attribute `name` checked to be a permutation of 0..rank-1; identity when absent.
Result<std::vector<int64_t>> read_perm(const InferContext& ctx, std::string_view name, size_t rank) {
  std::vector<int64_t> perm(rank);
  std::iota(perm.begin(), perm.end(), 0);
  const std::vector<int64_t>* attr = ctx.attrs().get_ints(name);
  if (!attr) return perm;
  std::vector<bool> seen(rank);
  bool valid = attr->size() == rank;
  for (int64_t p : *attr) {
    valid = valid && p >= 0 && p < int64_t(rank) && !seen[size_t(p)];
    if (valid) seen[size_t(p)] = true;
  }
  if (!valid) return ctx.error("{} [{}] is not a permutation of 0..{}", name, fmt::join(*attr, ","), rank - 1);
  return *attr;
}

// Operand i's shape after its slice attribute, checked to fit.
Result<SymShape> sliced(const InferContext& ctx, size_t i, size_t rank) {
  SymShape shape = ctx.input(i).shape.value_or(unknown_shape(int64_t(rank)));
  const std::vector<int64_t>* slice = ctx.attrs().get_ints(kOperands[i].slice);
  if (!slice) return shape;
  const bool valid = slice->size() == 3 && (*slice)[0] >= 0 && (*slice)[0] < int64_t(rank) && (*slice)[1] >= 0 &&
                     (*slice)[2] > 0;
  const Dim* dim = valid ? &shape[size_t((*slice)[0])] : nullptr;
  if (!valid || (dim->known() && ((*slice)[2] > dim->value || (*slice)[1] > dim->value - (*slice)[2])))
    return ctx.error("{} [{}] is not [axis, start, length] within {}'s shape {}", kOperands[i].slice,
                     fmt::join(*slice, ","), kOperands[i].name, sym_shape_to_string(shape));
  shape[size_t((*slice)[0])] = Dim((*slice)[2]);
  return shape;
}

// out[j] = in[perm[j]], as ONNX Transpose.
SymShape transposed(const SymShape& in, const std::vector<int64_t>& perm) {
  SymShape out;
  for (int64_t p : perm) out.push_back(in[size_t(p)]);
  return out;
}

Status check_same(const InferContext& ctx, size_t x, size_t y, const Dim& a, const Dim& b, std::string_view what) {
  if (a.known() && b.known() && a.value != b.value)
    return ctx.error("{} and {} disagree on {}: {} vs {}", kOperands[x].name, kOperands[y].name, what, a.value,
                     b.value);
  return ok_status();
}

// The better-known of two dims that must be equal.
Dim either(const Dim& a, const Dim& b) { return a.known() || (!b.known() && !a.symbol.empty()) ? a : b; }

// The scores' shape [batch..., Sq, Sk], once Qh, Kt and Vh agree on the
// batch dims, D and Sk.
Result<SymShape> scores_shape(const InferContext& ctx, const std::array<SymShape, 3>& logical) {
  const auto& [qh, kt, vh] = logical;
  const size_t r = qh.size();
  SymShape scores;
  for (size_t b = 0; b + 2 < r; ++b) {
    for (auto [x, y] : {std::pair<size_t, size_t>{0, 1}, {0, 2}, {1, 2}})
      KILN_RETURN_IF_ERROR(check_same(ctx, x, y, logical[x][b], logical[y][b], fmt::format("batch dim {}", b)));
    scores.push_back(either(either(qh[b], kt[b]), vh[b]));
  }
  KILN_RETURN_IF_ERROR(check_same(ctx, 0, 1, qh[r - 1], kt[r - 2], "the head dim (D)"));
  KILN_RETURN_IF_ERROR(check_same(ctx, 1, 2, kt[r - 1], vh[r - 2], "the key count (Sk)"));
  scores.push_back(qh[r - 2]);
  scores.push_back(either(kt[r - 1], vh[r - 2]));
  return scores;
}

Status check_mask(const InferContext& ctx, const SymShape& scores) {
  const auto& mask = ctx.input(kMaskInput).shape;
  if (!mask) return ok_status();
  bool fits = mask->size() <= scores.size();
  for (size_t k = 0; fits && k < mask->size(); ++k) {
    const Dim& m = (*mask)[mask->size() - 1 - k];
    const Dim& s = scores[scores.size() - 1 - k];
    fits = !m.known() || !s.known() || m.value == 1 || m.value == s.value;
  }
  if (!fits)
    return ctx.error("Mask shape {} does not broadcast to the scores' shape {}", sym_shape_to_string(*mask),
                     sym_shape_to_string(scores));
  return ok_status();
}

}  // namespace

Status infer_Attention(InferContext& ctx) {
  for (size_t i = 0; i < kOperands.size(); ++i) {
    if (!ctx.has_input(i)) return ctx.error("{} (input {}) is required", kOperands[i].name, i);
    KILN_RETURN_IF_ERROR(require_dtype(ctx, i, {DType::kF32}));
  }
  if (ctx.has_input(kMaskInput)) KILN_RETURN_IF_ERROR(require_dtype(ctx, kMaskInput, {DType::kF32}));
  const AttributeValue* scale = ctx.attrs().find(attention_attrs::kScale);
  if (!scale || !std::holds_alternative<float>(*scale)) return ctx.error("scale (a float attribute) is required");
  KILN_ASSIGN_OR_RETURN(std::optional<size_t> rank, operand_rank(ctx));
  if (!rank) {
    set_output(ctx, 0, DType::kF32, std::nullopt);
    return ok_status();
  }
  const size_t r = *rank;
  std::array<SymShape, 3> logical;  // Qh, Kt, Vh
  for (size_t i = 0; i < kOperands.size(); ++i) {
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> perm, read_perm(ctx, kOperands[i].perm, r));
    KILN_ASSIGN_OR_RETURN(SymShape shape, sliced(ctx, i, r));
    logical[i] = transposed(shape, perm);
  }
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> out_perm, read_perm(ctx, attention_attrs::kOutPerm, r));
  KILN_ASSIGN_OR_RETURN(SymShape out, scores_shape(ctx, logical));
  if (ctx.has_input(kMaskInput)) KILN_RETURN_IF_ERROR(check_mask(ctx, out));
  out.back() = logical[2][r - 1];  // [batch..., Sq, Dv]
  set_output(ctx, 0, DType::kF32, transposed(out, out_perm));
  return ok_status();
}

}  // namespace kiln
