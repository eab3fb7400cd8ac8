#include "kernels/movement_util.h"

#include <algorithm>
#include <cstring>

#include "ir/infer/movement.h"

namespace kiln {

int64_t movement_axis(const KernelContext& ctx, int64_t dflt, int64_t rank) {
  int64_t axis = ctx.attrs().get_int("axis", dflt);
  return axis < 0 ? axis + rank : axis;
}

Status movement_check_indices(const KernelContext& ctx, const TensorView& indices, int64_t size) {
  for (int64_t i = 0; i < indices.numel(); ++i) {
    int64_t v = index_value(indices, i);
    if (v < -size || v >= size)
      return invalid_argument("{}: index {} is out of range for an axis of size {}",
                              node_label(*ctx.node), v, size);
  }
  return ok_status();
}

Status movement_view_copy(KernelContext& ctx) {
  const TensorView& in = *ctx.input(0);
  TensorView& out = *ctx.output(0);
  if (out.data != in.data && in.numel() > 0) std::memcpy(out.data, in.data, in.nbytes());
  return ok_status();
}

void slice_decode(const KernelContext& ctx, int64_t* first, int64_t* step) {
  const TensorView& in = *ctx.input(0);
  const TensorView &starts = *ctx.input(1), &ends = *ctx.input(2);
  const TensorView *axes = ctx.input(3), *steps = ctx.input(4);
  std::fill_n(first, in.rank(), 0);
  std::fill_n(step, in.rank(), 1);
  for (int64_t i = 0; i < starts.numel(); ++i) {
    int64_t a = axes ? index_value(*axes, i) : i;
    if (a < 0) a += in.rank();
    step[a] = steps ? index_value(*steps, i) : 1;
    first[a] = slice_range(in.shape[size_t(a)], index_value(starts, i), index_value(ends, i), step[a]).start;
  }
}

}  // namespace kiln
