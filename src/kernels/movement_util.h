// What the reference and the CPU movement kernels both need: reading index
// tensors, validating indices, decoding Slice's inputs, the view ops' copy.
// Nothing here allocates, so CPU kernels may call it.
#pragma once

#include "kernels/kernel.h"

namespace kiln {

// Element i of an i32 or i64 index tensor (infer_<Op> admits only those).
inline int64_t index_value(const TensorView& t, int64_t i) {
  return t.dtype == DType::kI32 ? int64_t(t.as<int32_t>()[i]) : t.as<int64_t>()[i];
}

// The node's `axis` attribute in [0, rank) (infer_<Op> has checked its range).
int64_t movement_axis(const KernelContext& ctx, int64_t dflt, int64_t rank);

// InvalidArgument naming the node unless every index lies in [-size, size):
// a kernel never reads out of bounds, whatever the indices hold.
Status movement_check_indices(const KernelContext& ctx, const TensorView& indices, int64_t size);

// Reshape, Flatten, Squeeze, Unsqueeze: the output is input 0's bytes. The
// executor may alias the two, and then there is nothing to copy.
Status movement_view_copy(KernelContext& ctx);

// Slice's first index and step for every axis of input 0 (unsliced axes:
// 0 and 1). `first` and `step` hold at least rank entries.
void slice_decode(const KernelContext& ctx, int64_t* first, int64_t* step);

}  // namespace kiln
