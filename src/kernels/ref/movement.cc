// Reference kernels for the movement ops: every output element is located by
// its multi-index and copied from the input element the op maps it to.
// Slow and obvious on purpose; they are the test oracle only.
#include <cstring>

#include "kernels/movement_util.h"

namespace kiln {

namespace {

Shape unravel(int64_t flat, const Shape& shape) {
  Shape idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return idx;
}

int64_t ravel(const Shape& idx, const Shape& shape) {
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + idx[d];
  return flat;
}

void copy_element(const TensorView& src, int64_t si, const TensorView& dst, int64_t di) {
  size_t es = dtype_size(src.dtype);
  std::memcpy(static_cast<char*>(dst.data) + size_t(di) * es,
              static_cast<const char*>(src.data) + size_t(si) * es, es);
}

// out[i] = in[source(i)] for every output multi-index i.
template <typename Source>
void map_from(const TensorView& in, TensorView& out, Source source) {
  for (int64_t flat = 0; flat < out.numel(); ++flat)
    copy_element(in, ravel(source(unravel(flat, out.shape)), in.shape), out, flat);
}

// Concat and Split: copies between `piece` and the slab of `whole` that
// starts at `offset` along `axis`.
void copy_piece(const TensorView& piece, const TensorView& whole, size_t axis, int64_t offset,
                bool into_whole) {
  for (int64_t flat = 0; flat < piece.numel(); ++flat) {
    Shape idx = unravel(flat, piece.shape);
    idx[axis] += offset;
    if (into_whole)
      copy_element(piece, flat, whole, ravel(idx, whole.shape));
    else
      copy_element(whole, ravel(idx, whole.shape), piece, flat);
  }
}

}  // namespace

Status ref_Reshape(KernelContext& ctx) { return movement_view_copy(ctx); }
Status ref_Flatten(KernelContext& ctx) { return movement_view_copy(ctx); }
Status ref_Squeeze(KernelContext& ctx) { return movement_view_copy(ctx); }
Status ref_Unsqueeze(KernelContext& ctx) { return movement_view_copy(ctx); }

Status ref_Transpose(KernelContext& ctx) {
  const TensorView& in = *ctx.input(0);
  std::vector<int64_t> perm(in.shape.size());
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = int64_t(perm.size() - 1 - i);
  if (const auto* p = ctx.attrs().get_ints("perm")) perm = *p;
  map_from(in, *ctx.output(0), [&](const Shape& o) {
    Shape i(o.size());
    for (size_t d = 0; d < o.size(); ++d) i[size_t(perm[d])] = o[d];
    return i;
  });
  return ok_status();
}

Status ref_Concat(KernelContext& ctx) {
  TensorView& out = *ctx.output(0);
  int64_t axis = movement_axis(ctx, 1, out.rank());
  int64_t offset = 0;
  for (const TensorView* in : ctx.inputs) {
    copy_piece(*in, out, size_t(axis), offset, true);
    offset += in->shape[size_t(axis)];
  }
  return ok_status();
}

Status ref_Split(KernelContext& ctx) {
  const TensorView& in = *ctx.input(0);
  int64_t axis = movement_axis(ctx, 0, in.rank());
  int64_t offset = 0;
  for (TensorView* out : ctx.outputs) {
    if (!out) return ctx.unsupported_error("an omitted Split output");
    copy_piece(*out, in, size_t(axis), offset, false);
    offset += out->shape[size_t(axis)];
  }
  return ok_status();
}

Status ref_Slice(KernelContext& ctx) {
  const TensorView& in = *ctx.input(0);
  Shape first(in.shape.size()), step(in.shape.size());
  slice_decode(ctx, first.data(), step.data());
  map_from(in, *ctx.output(0), [&](const Shape& o) {
    Shape i(o.size());
    for (size_t d = 0; d < o.size(); ++d) i[d] = first[d] + o[d] * step[d];
    return i;
  });
  return ok_status();
}

Status ref_Gather(KernelContext& ctx) {
  const TensorView& data = *ctx.input(0);
  const TensorView& indices = *ctx.input(1);
  size_t axis = size_t(movement_axis(ctx, 0, data.rank()));
  KILN_RETURN_IF_ERROR(movement_check_indices(ctx, indices, data.shape[axis]));
  size_t q = indices.shape.size();
  map_from(data, *ctx.output(0), [&](const Shape& o) {
    Shape i(o.begin(), o.begin() + axis);
    int64_t v = index_value(indices, ravel(Shape(o.begin() + axis, o.begin() + axis + q), indices.shape));
    i.push_back(v < 0 ? v + data.shape[axis] : v);
    i.insert(i.end(), o.begin() + axis + q, o.end());
    return i;
  });
  return ok_status();
}

Status ref_GatherElements(KernelContext& ctx) {
  const TensorView& data = *ctx.input(0);
  const TensorView& indices = *ctx.input(1);
  size_t axis = size_t(movement_axis(ctx, 0, data.rank()));
  KILN_RETURN_IF_ERROR(movement_check_indices(ctx, indices, data.shape[axis]));
  map_from(data, *ctx.output(0), [&](Shape idx) {
    int64_t v = index_value(indices, ravel(idx, indices.shape));
    idx[axis] = v < 0 ? v + data.shape[axis] : v;
    return idx;
  });
  return ok_status();
}

Status ref_Expand(KernelContext& ctx) {
  const TensorView& in = *ctx.input(0);
  size_t lead = ctx.output(0)->shape.size() - in.shape.size();
  map_from(in, *ctx.output(0), [&](const Shape& o) {
    Shape i(in.shape.size());
    for (size_t d = 0; d < i.size(); ++d) i[d] = in.shape[d] == 1 ? 0 : o[d + lead];
    return i;
  });
  return ok_status();
}

Status ref_Tile(KernelContext& ctx) {
  const TensorView& in = *ctx.input(0);
  map_from(in, *ctx.output(0), [&](const Shape& o) {
    Shape i(o.size());
    for (size_t d = 0; d < o.size(); ++d) i[d] = o[d] % in.shape[d];
    return i;
  });
  return ok_status();
}

}  // namespace kiln
