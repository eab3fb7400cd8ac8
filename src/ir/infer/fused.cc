// Shape inference for the fused ops kiln's passes create (op_table.def,
// group "fused"). Each checks its attributes, since a pass bug would
// otherwise surface as a wrong answer.
#include "ir/infer/infer_util.h"

namespace kiln {

namespace {

Status same_shape_f32(InferContext& ctx) {
  KILN_RETURN_IF_ERROR(require_dtype(ctx, 0, {DType::kF32}));
  set_output(ctx, 0, DType::kF32, ctx.input(0).shape);
  return ok_status();
}

}  // namespace

Status infer_Gelu(InferContext& ctx) {
  const std::string form = ctx.attrs().get_string("approximate", "none");
  if (form != "none" && form != "tanh" && form != "sigmoid")
    return ctx.error("approximate must be none, tanh or sigmoid, got '{}'", form);
  return same_shape_f32(ctx);
}

Status infer_Silu(InferContext& ctx) { return same_shape_f32(ctx); }

Status infer_Geglu(InferContext& ctx) {
  KILN_RETURN_IF_ERROR(require_dtype(ctx, 0, {DType::kF32}));
  const std::string form = ctx.attrs().get_string("approximate", "none");
  if (form != "none" && form != "tanh") return ctx.error("approximate must be none or tanh, got '{}'", form);
  std::optional<SymShape> out = ctx.input(0).shape;
  if (out) {
    if (out->empty()) return ctx.error("X must have rank >= 1");
    Dim& last = out->back();
    if (last.known() && last.value % 2 != 0) return ctx.error("the last dim {} does not split in halves", last.value);
    last = last.known() ? Dim(last.value / 2) : Dim();
  }
  set_output(ctx, 0, DType::kF32, std::move(out));
  return ok_status();
}

Status infer_GroupNorm(InferContext& ctx) {
  KILN_RETURN_IF_ERROR(require_dtype(ctx, 0, {DType::kF32}));
  for (size_t i : {1, 2}) KILN_RETURN_IF_ERROR(require_dtype(ctx, i, {DType::kF32}));
  const int64_t groups = ctx.attrs().get_int("num_groups", 0);
  if (groups < 1) return ctx.error("num_groups must be positive, got {}", groups);
  const std::string activation = ctx.attrs().get_string("activation", "none");
  if (activation != "none" && activation != "silu")
    return ctx.error("activation must be none or silu, got '{}'", activation);
  const auto& x = ctx.input(0).shape;
  if (x) {
    if (x->size() < 2) return ctx.error("X must be [N, C, ...], got rank {}", x->size());
    const Dim& channels = (*x)[1];
    if (channels.known() && channels.value % groups != 0)
      return ctx.error("{} channels do not split into {} groups", channels.value, groups);
    for (size_t i : {1, 2}) {
      const auto& p = ctx.input(i).shape;
      if (p && (p->size() != 1 || ((*p)[0].known() && channels.known() && (*p)[0].value != channels.value)))
        return ctx.error("input {} must be [{}], got {}", i, channels.known() ? std::to_string(channels.value) : "C",
                         sym_shape_to_string(*p));
    }
  }
  set_output(ctx, 0, DType::kF32, x);
  return ok_status();
}

// X [B, S, C]; Scale and Shift [B, 1, C] (one row per sample) or [C].
Status infer_ModulatedLayerNorm(InferContext& ctx) {
  for (size_t i : {0, 1, 2}) KILN_RETURN_IF_ERROR(require_dtype(ctx, i, {DType::kF32}));
  const auto& x = ctx.input(0).shape;
  if (x) {
    if (x->size() != 3) return ctx.error("X must be [B, S, C], got {}", sym_shape_to_string(*x));
    for (size_t i : {1, 2}) {
      const auto& m = ctx.input(i).shape;
      if (!m) continue;
      const bool per_sample = m->size() == 3 && (*m)[0] == (*x)[0] && (*m)[1] == Dim(1) && (*m)[2] == (*x)[2];
      const bool shared = m->size() == 1 && (*m)[0] == (*x)[2];
      if (!per_sample && !shared)
        return ctx.error("input {} must be [B, 1, C] or [C] for X {}, got {}", i, sym_shape_to_string(*x),
                         sym_shape_to_string(*m));
    }
  }
  set_output(ctx, 0, DType::kF32, x);
  return ok_status();
}

// X of any rank >= 1; Scale [C] for C = X's size along `axis`.
Status infer_RmsNorm(InferContext& ctx) {
  for (size_t i : {0, 1}) KILN_RETURN_IF_ERROR(require_dtype(ctx, i, {DType::kF32}));
  const std::string activation = ctx.attrs().get_string("activation", "none");
  if (activation != "none" && activation != "silu")
    return ctx.error("activation must be none or silu, got '{}'", activation);
  if (ctx.attrs().get_float("epsilon", 1e-6f) < 0) return ctx.error("epsilon must not be negative");
  const auto& x = ctx.input(0).shape;
  if (x) {
    KILN_ASSIGN_OR_RETURN(const int64_t axis, normalize_axis(ctx, ctx.attrs().get_int("axis", -1), int64_t(x->size())));
    const Dim& channels = (*x)[size_t(axis)];
    const auto& scale = ctx.input(1).shape;
    if (scale && (scale->size() != 1 || ((*scale)[0].known() && channels.known() && (*scale)[0] != channels)))
      return ctx.error("Scale must be [{}], got {}", channels.known() ? std::to_string(channels.value) : "C",
                       sym_shape_to_string(*scale));
  }
  set_output(ctx, 0, DType::kF32, x);
  return ok_status();
}

// X [B, S, H*D]; Cos and Sin [S, D/2].
Status infer_Rope(InferContext& ctx) {
  for (size_t i : {0, 1, 2}) KILN_RETURN_IF_ERROR(require_dtype(ctx, i, {DType::kF32}));
  const auto& x = ctx.input(0).shape;
  if (x && x->size() != 3) return ctx.error("X must be [B, S, H*D], got {}", sym_shape_to_string(*x));
  for (size_t i : {1, 2}) {
    const auto& t = ctx.input(i).shape;
    if (!t) continue;
    if (t->size() != 2) return ctx.error("input {} must be [S, D/2], got {}", i, sym_shape_to_string(*t));
    if (x && (*t)[0].known() && (*x)[1].known() && (*t)[0] != (*x)[1])
      return ctx.error("input {} has {} rows for {} tokens", i, (*t)[0].value, (*x)[1].value);
    if (x && (*t)[1].known() && (*x)[2].known() && ((*t)[1].value < 1 || (*x)[2].value % (2 * (*t)[1].value) != 0))
      return ctx.error("X's width {} is no whole number of heads of {} pairs", (*x)[2].value, (*t)[1].value);
  }
  const auto &cos = ctx.input(1).shape, &sin = ctx.input(2).shape;
  if (cos && sin && *cos != *sin)
    return ctx.error("Cos {} and Sin {} differ", sym_shape_to_string(*cos), sym_shape_to_string(*sin));
  set_output(ctx, 0, DType::kF32, x);
  return ok_status();
}

}  // namespace kiln
