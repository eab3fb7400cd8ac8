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

}  // namespace kiln
