#include "ir/infer/infer_util.h"

#include <algorithm>

namespace kiln {

Result<SymShape> broadcast_shapes(const SymShape& a, const SymShape& b) {
  size_t rank = std::max(a.size(), b.size());
  SymShape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const Dim one(1);
    const Dim& da = i < rank - a.size() ? one : a[i - (rank - a.size())];
    const Dim& db = i < rank - b.size() ? one : b[i - (rank - b.size())];
    if (da.known() && db.known()) {
      if (da.value != db.value && da.value != 1 && db.value != 1)
        return invalid_argument("shapes {} and {} do not broadcast", sym_shape_to_string(a),
                                sym_shape_to_string(b));
      out[i] = Dim(da.value == 1 ? db.value : da.value);
    } else if (da.known() && da.value == 1) {
      out[i] = db;
    } else if (db.known() && db.value == 1) {
      out[i] = da;
    } else if (da == db) {
      out[i] = da;
    } else if (!da.known() && !db.known()) {
      out[i] = Dim();  // two different symbols: unknown until run time
    } else {
      out[i] = da.known() ? da : db;  // a symbol against a known size > 1: must equal it
    }
  }
  return out;
}

Result<std::optional<SymShape>> broadcast_inputs(const InferContext& ctx) {
  std::optional<SymShape> out;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) continue;
    if (!ctx.input(i).shape) return std::optional<SymShape>();
    if (!out) {
      out = *ctx.input(i).shape;
      continue;
    }
    auto b = broadcast_shapes(*out, *ctx.input(i).shape);
    if (!b.ok()) return b.status().with_context(node_label(ctx.node()));
    out = std::move(b).value();
  }
  return out;
}

Result<int64_t> normalize_axis(const InferContext& ctx, int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    return ctx.error("axis {} is out of range for rank {}", axis, rank);
  return axis < 0 ? axis + rank : axis;
}

std::optional<std::vector<int64_t>> input_ints(const InferContext& ctx, size_t i) {
  if (!ctx.has_input(i) || !ctx.input(i).value) return std::nullopt;
  const Tensor& t = *ctx.input(i).value;
  if (t.dtype() != DType::kI64 && t.dtype() != DType::kI32) return std::nullopt;
  std::vector<int64_t> out(size_t(t.numel()));
  for (int64_t k = 0; k < t.numel(); ++k) out[size_t(k)] = t.element_as_int(k);
  return out;
}

std::optional<std::vector<double>> input_doubles(const InferContext& ctx, size_t i) {
  if (!ctx.has_input(i) || !ctx.input(i).value) return std::nullopt;
  const Tensor& t = *ctx.input(i).value;
  if (t.dtype() == DType::kBool) return std::nullopt;
  std::vector<double> out(size_t(t.numel()));
  for (int64_t k = 0; k < t.numel(); ++k) out[size_t(k)] = t.element_as_double(k);
  return out;
}

std::optional<int64_t> sym_numel(const SymShape& s) {
  auto shape = sym_shape_concrete(s);
  if (!shape) return std::nullopt;
  auto n = shape_numel_checked(*shape);  // past 2^40 elements: treated as unknown
  return n.ok() ? std::optional<int64_t>(*n) : std::nullopt;
}

Status require_dtype(const InferContext& ctx, size_t i, std::initializer_list<DType> allowed) {
  DType d = ctx.input(i).dtype;
  for (DType a : allowed)
    if (a == d) return ok_status();
  return ctx.unsupported_error("input {} has dtype {}, which this op does not support", i,
                               dtype_name(d));
}

}  // namespace kiln
