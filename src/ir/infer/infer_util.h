// Helpers shared by the infer_<Op> functions.
#pragma once

#include <optional>
#include <vector>

#include "ir/shape_inference.h"

namespace kiln {

// Numpy-style broadcast of two shapes. Symbolic dims broadcast when equal or
// against 1; otherwise the result dim is unknown.
Result<SymShape> broadcast_shapes(const SymShape& a, const SymShape& b);
// Broadcast of every present input; nullopt when any rank is unknown.
Result<std::optional<SymShape>> broadcast_inputs(const InferContext& ctx);

// Maps axis in [-rank, rank) to [0, rank); an error naming the node otherwise.
Result<int64_t> normalize_axis(const InferContext& ctx, int64_t axis, int64_t rank);

// The integer contents of input i when its value is known (i64 or i32).
std::optional<std::vector<int64_t>> input_ints(const InferContext& ctx, size_t i);
// The contents of a known value as doubles.
std::optional<std::vector<double>> input_doubles(const InferContext& ctx, size_t i);

// Product of the dims; nullopt when any is unknown or the product is absurd.
std::optional<int64_t> sym_numel(const SymShape& s);

inline void set_output(InferContext& ctx, size_t i, DType dtype, std::optional<SymShape> shape) {
  ctx.output(i).present = true;
  ctx.output(i).dtype = dtype;
  ctx.output(i).shape = std::move(shape);
}

// Unknown dims for a tensor of known rank.
inline SymShape unknown_shape(int64_t rank) { return SymShape(size_t(rank)); }

// Error unless input i's dtype is one of `allowed`.
Status require_dtype(const InferContext& ctx, size_t i, std::initializer_list<DType> allowed);

}  // namespace kiln
