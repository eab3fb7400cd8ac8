// CPU kernels for the movement ops. They move bytes, so they dispatch on the
// element size (1/2/4/8), never on the dtype: every kiln dtype works.
//
// Most ops reduce to one strided copy: the output is walked densely in
// row-major order while the input is walked with per-dim strides (0 for a
// broadcast dim, negative for a reversed slice). Dims of size 1 are dropped
// and neighbours the input walks contiguously are merged, so the inner loop
// is as long as possible and usually a memcpy. Transpose, whose inner output
// dim is strided in the input, copies cache-line tiles instead.
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "kernels/movement_util.h"
#include "kernels/cpu/parallel.h"

namespace kiln {

namespace {

constexpr int kMaxDims = 32;              // Tile interleaves repeats with dims: 2 x rank
constexpr int kMaxRank = kMaxDims / 2;
constexpr size_t kParallelBytes = 1 << 18;  // below this a thread team costs more than it saves
constexpr size_t kMinPieceBytes = 1 << 15;  // smallest share of a row worth its own task

// Calls fn(T{}) with T the unsigned integer of the element size.
template <typename Fn>
void visit_element_size(size_t size, Fn&& fn) {
  switch (size) {
    case 1: fn(uint8_t{}); break;
    case 2: fn(uint16_t{}); break;
    case 4: fn(uint32_t{}); break;
    default: fn(uint64_t{}); break;
  }
}

// Dims walked in row-major order, with the input's stride (in elements) per dim.
struct Walk {
  int rank = 0;
  int64_t size[kMaxDims];
  int64_t stride[kMaxDims];

  void push(int64_t n, int64_t s) {
    size[rank] = n;
    stride[rank] = s;
    ++rank;
  }
  int64_t count(int begin, int end) const {
    int64_t n = 1;
    for (int d = begin; d < end; ++d) n *= size[d];
    return n;
  }
  // Drops size-1 dims; merges an outer dim into the next when stepping the
  // outer one equals running through the inner one.
  void simplify() {
    int r = 0;
    for (int d = 0; d < rank; ++d) {
      if (size[d] == 1) continue;
      if (r > 0 && stride[r - 1] == stride[d] * size[d]) {
        size[r - 1] *= size[d];
        stride[r - 1] = stride[d];
      } else {
        size[r] = size[d];
        stride[r] = stride[d];
        ++r;
      }
    }
    rank = r;
  }
};

// A position in the first `dims` dims of a Walk, advanced in row-major order;
// `offset` is the input element it points at.
struct Cursor {
  Cursor(const Walk& w, int dims, int64_t flat) : w(w), dims(dims) {
    for (int d = dims - 1; d >= 0; --d) {
      idx[d] = flat % w.size[d];
      flat /= w.size[d];
      offset += idx[d] * w.stride[d];
    }
  }
  void next() {
    for (int d = dims - 1; d >= 0; --d) {
      offset += w.stride[d];
      if (++idx[d] < w.size[d]) return;
      offset -= w.stride[d] * w.size[d];
      idx[d] = 0;
    }
  }

  const Walk& w;
  int dims;
  int64_t idx[kMaxDims];
  int64_t offset = 0;
};

void dense_strides(const Shape& shape, int64_t* strides) {
  int64_t s = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    strides[d] = s;
    s *= shape[d];
  }
}

template <typename T>
void copy_row(T* dst, const T* src, int64_t n, int64_t stride) {
  if (n == 1) {
    *dst = *src;
  } else if (stride == 1) {
    std::memcpy(dst, src, size_t(n) * sizeof(T));
  } else if (stride == 0) {
    std::fill_n(dst, n, *src);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = src[i * stride];
  }
}

// How many pieces to cut each of `rows` rows of `row_bytes` into so that a
// few long rows (a channel slice at batch 2) still keep every thread busy.
int64_t row_pieces(int64_t rows, size_t row_bytes) {
  int64_t threads = omp_get_max_threads();
  if (rows >= threads) return 1;
  int64_t wanted = (threads + rows - 1) / rows;
  return std::clamp<int64_t>(int64_t(row_bytes / kMinPieceBytes), 1, wanted);
}

// Fills the dense output `out` from `in` (already offset to the first element)
// walked by `w`, one inner row (or a piece of one) at a time.
void strided_copy(size_t element_size, const void* in, void* out, Walk w) {
  w.simplify();
  int outer = std::max(w.rank - 1, 0);
  int64_t inner = w.rank ? w.size[outer] : 1, inner_stride = w.rank ? w.stride[outer] : 1;
  int64_t rows = w.count(0, outer);
  bool parallel = size_t(rows * inner) * element_size >= kParallelBytes;
  int64_t pieces = parallel ? row_pieces(rows, size_t(inner) * element_size) : 1;
  visit_element_size(element_size, [&](auto tag) {
    using T = decltype(tag);
    const T* src = static_cast<const T*>(in);
    T* dst = static_cast<T*>(out);
    const int64_t piece_len = (inner + pieces - 1) / pieces;
    parallel_ranges(rows * pieces, parallel, [&](int64_t begin, int64_t end) {
      int64_t row = begin / pieces, piece = begin % pieces;
      Cursor c(w, outer, row);
      for (int64_t t = begin; t < end; ++t) {
        int64_t lo = piece * piece_len, n = std::min(inner - lo, piece_len);
        if (n > 0) copy_row(dst + row * inner + lo, src + c.offset + lo * inner_stride, n, inner_stride);
        if (++piece == pieces) {
          piece = 0;
          ++row;
          c.next();
        }
      }
    });
  });
}

// Transpose where the output's inner dim is strided in the input: copy square
// tiles of one cache line per side between the output's inner dim and the
// dim the input holds contiguously, so both sides stay in L1.
template <typename T>
void transpose_tiled(const T* src, T* dst, const Walk& w) {
  int last = w.rank - 1;
  int j = 0;
  while (w.stride[j] != 1) ++j;  // exists: the input's innermost moving dim
  int64_t out_strides[kMaxDims];
  int64_t s = 1;
  for (int d = last; d >= 0; --d) {
    out_strides[d] = s;
    s *= w.size[d];
  }
  Walk outer_in, outer_out;
  for (int d = 0; d < last; ++d) {
    if (d == j) continue;
    outer_in.push(w.size[d], w.stride[d]);
    outer_out.push(w.size[d], out_strides[d]);
  }
  const int64_t xs = w.size[last], x_stride = w.stride[last];
  const int64_t ys = w.size[j], y_stride = out_strides[j];
  constexpr int64_t kTile = std::max<int64_t>(8, 64 / sizeof(T));
  const int64_t y_tiles = (ys + kTile - 1) / kTile;
  bool parallel = size_t(s) * sizeof(T) >= kParallelBytes;
  parallel_ranges(outer_in.count(0, outer_in.rank) * y_tiles, parallel, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      Cursor ci(outer_in, outer_in.rank, t / y_tiles), co(outer_out, outer_out.rank, t / y_tiles);
      const T* in = src + ci.offset;
      T* out = dst + co.offset;
      int64_t y0 = t % y_tiles * kTile, y1 = std::min(ys, y0 + kTile);
      for (int64_t x0 = 0; x0 < xs; x0 += kTile) {
        int64_t x1 = std::min(xs, x0 + kTile);
        for (int64_t y = y0; y < y1; ++y)
          for (int64_t x = x0; x < x1; ++x) out[y * y_stride + x] = in[x * x_stride + y];
      }
    }
  });
}

Status check_rank(const KernelContext& ctx, int64_t rank) {
  if (rank > kMaxRank) return ctx.unsupported_error("rank {} (at most {})", rank, kMaxRank);
  return ok_status();
}

// Concat and Split: along `axis`, each outer row of the whole tensor is the
// parts' rows side by side, so both are row memcpy's.
void copy_parts(const TensorView& whole, int64_t axis, size_t num_parts,
                const TensorView* const* parts, bool into_whole) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= whole.shape[size_t(d)];
  for (size_t d = size_t(axis) + 1; d < whole.shape.size(); ++d) inner *= whole.shape[d];
  size_t row_bytes = size_t(whole.shape[size_t(axis)] * inner) * dtype_size(whole.dtype);
  char* base = static_cast<char*>(whole.data);
  bool parallel = whole.nbytes() >= kParallelBytes;
  int64_t pieces = parallel ? row_pieces(outer, row_bytes) : 1;
  const size_t piece_len = (row_bytes + size_t(pieces) - 1) / size_t(pieces);
  parallel_ranges(outer * pieces, parallel, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      // Task t copies bytes [lo, hi) of one outer row, whichever parts they fall in.
      int64_t o = t / pieces;
      size_t lo = size_t(t % pieces) * piece_len, hi = std::min(row_bytes, lo + piece_len);
      size_t at = 0;  // where part k starts in the row
      for (size_t k = 0; k < num_parts && at < hi; ++k) {
        const TensorView& p = *parts[k];
        size_t bytes = size_t(p.shape[size_t(axis)] * inner) * dtype_size(p.dtype);
        size_t from = std::max(lo, at), to = std::min(hi, at + bytes);
        if (from < to) {
          char* row = base + size_t(o) * row_bytes + from;
          char* part = static_cast<char*>(p.data) + size_t(o) * bytes + (from - at);
          std::memcpy(into_whole ? row : part, into_whole ? part : row, to - from);
        }
        at += bytes;
      }
    }
  });
}

}  // namespace

Status cpu_Reshape(KernelContext& ctx) { return movement_view_copy(ctx); }
Status cpu_Flatten(KernelContext& ctx) { return movement_view_copy(ctx); }
Status cpu_Squeeze(KernelContext& ctx) { return movement_view_copy(ctx); }
Status cpu_Unsqueeze(KernelContext& ctx) { return movement_view_copy(ctx); }

Status cpu_Transpose(KernelContext& ctx) {
  const TensorView& in = *ctx.input(0);
  TensorView& out = *ctx.output(0);
  KILN_RETURN_IF_ERROR(check_rank(ctx, in.rank()));
  if (out.numel() == 0) return ok_status();
  const std::vector<int64_t>* perm = ctx.attrs().get_ints("perm");
  int64_t in_strides[kMaxDims];
  dense_strides(in.shape, in_strides);
  Walk w;
  for (int64_t d = 0; d < in.rank(); ++d) {
    size_t from = size_t(perm ? (*perm)[size_t(d)] : in.rank() - 1 - d);
    w.push(in.shape[from], in_strides[from]);
  }
  w.simplify();
  if (w.rank == 0 || w.stride[w.rank - 1] == 1) {
    strided_copy(dtype_size(in.dtype), in.data, out.data, w);  // whole inner rows move
    return ok_status();
  }
  visit_element_size(dtype_size(in.dtype), [&](auto tag) {
    using T = decltype(tag);
    transpose_tiled(static_cast<const T*>(in.data), static_cast<T*>(out.data), w);
  });
  return ok_status();
}

Status cpu_Concat(KernelContext& ctx) {
  TensorView& out = *ctx.output(0);
  copy_parts(out, movement_axis(ctx, 1, out.rank()), ctx.inputs.size(), ctx.inputs.data(), true);
  return ok_status();
}

Status cpu_Split(KernelContext& ctx) {
  const TensorView& in = *ctx.input(0);
  for (const TensorView* out : ctx.outputs)
    if (!out) return ctx.unsupported_error("an omitted Split output");
  copy_parts(in, movement_axis(ctx, 0, in.rank()), ctx.outputs.size(), ctx.outputs.data(), false);
  return ok_status();
}

Status cpu_Slice(KernelContext& ctx) {
  const TensorView& in = *ctx.input(0);
  TensorView& out = *ctx.output(0);
  KILN_RETURN_IF_ERROR(check_rank(ctx, in.rank()));
  if (out.numel() == 0) return ok_status();
  int64_t first[kMaxDims], step[kMaxDims], in_strides[kMaxDims];
  slice_decode(ctx, first, step);
  dense_strides(in.shape, in_strides);
  int64_t offset = 0;
  Walk w;
  for (int64_t d = 0; d < in.rank(); ++d) {
    offset += first[d] * in_strides[d];
    // A dim taking one element never steps, whatever (huge) step it was given.
    w.push(out.shape[size_t(d)], out.shape[size_t(d)] > 1 ? step[d] * in_strides[d] : 0);
  }
  size_t es = dtype_size(in.dtype);
  strided_copy(es, static_cast<const char*>(in.data) + size_t(offset) * es, out.data, w);
  return ok_status();
}

Status cpu_Gather(KernelContext& ctx) {
  const TensorView& data = *ctx.input(0);
  const TensorView& indices = *ctx.input(1);
  TensorView& out = *ctx.output(0);
  size_t axis = size_t(movement_axis(ctx, 0, data.rank()));
  int64_t size = data.shape[axis];
  KILN_RETURN_IF_ERROR(movement_check_indices(ctx, indices, size));
  if (out.numel() == 0) return ok_status();
  int64_t outer = 1, inner = 1, count = indices.numel();
  for (size_t d = 0; d < axis; ++d) outer *= data.shape[d];
  for (size_t d = axis + 1; d < data.shape.size(); ++d) inner *= data.shape[d];
  // One task per gathered row: along axis 0 of an embedding table these are
  // whole-row memcpy's.
  visit_element_size(dtype_size(data.dtype), [&](auto tag) {
    using T = decltype(tag);
    const T* src = data.as<T>();
    T* dst = out.as<T>();
    parallel_ranges(outer * count, out.nbytes() >= kParallelBytes, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        int64_t o = r / count, v = index_value(indices, r % count);
        if (v < 0) v += size;
        copy_row(dst + r * inner, src + (o * size + v) * inner, inner, 1);
      }
    });
  });
  return ok_status();
}

Status cpu_GatherElements(KernelContext& ctx) {
  const TensorView& data = *ctx.input(0);
  const TensorView& indices = *ctx.input(1);
  TensorView& out = *ctx.output(0);
  KILN_RETURN_IF_ERROR(check_rank(ctx, data.rank()));
  size_t axis = size_t(movement_axis(ctx, 0, data.rank()));
  int64_t size = data.shape[axis];
  KILN_RETURN_IF_ERROR(movement_check_indices(ctx, indices, size));
  if (out.numel() == 0) return ok_status();
  int64_t data_strides[kMaxDims];
  dense_strides(data.shape, data_strides);
  // Walk the indices' shape through the data; the axis offset comes from the index.
  Walk w;
  for (size_t d = 0; d < indices.shape.size(); ++d)
    w.push(indices.shape[d], d == axis ? 0 : data_strides[d]);
  const int64_t axis_stride = data_strides[axis];
  visit_element_size(dtype_size(data.dtype), [&](auto tag) {
    using T = decltype(tag);
    const T* src = data.as<T>();
    T* dst = out.as<T>();
    parallel_ranges(out.numel(), out.nbytes() >= kParallelBytes, [&](int64_t begin, int64_t end) {
      Cursor c(w, w.rank, begin);
      for (int64_t e = begin; e < end; ++e, c.next()) {
        int64_t v = index_value(indices, e);
        dst[e] = src[c.offset + (v < 0 ? v + size : v) * axis_stride];
      }
    });
  });
  return ok_status();
}

Status cpu_Expand(KernelContext& ctx) {
  const TensorView& in = *ctx.input(0);
  TensorView& out = *ctx.output(0);
  KILN_RETURN_IF_ERROR(check_rank(ctx, out.rank()));
  if (out.numel() == 0) return ok_status();
  int64_t in_strides[kMaxDims];
  dense_strides(in.shape, in_strides);
  size_t lead = out.shape.size() - in.shape.size();
  Walk w;
  for (size_t d = 0; d < out.shape.size(); ++d) {
    bool broadcast = d < lead || in.shape[d - lead] == 1;
    w.push(out.shape[d], broadcast ? 0 : in_strides[d - lead]);
  }
  strided_copy(dtype_size(in.dtype), in.data, out.data, w);
  return ok_status();
}

Status cpu_Tile(KernelContext& ctx) {
  const TensorView& in = *ctx.input(0);
  TensorView& out = *ctx.output(0);
  KILN_RETURN_IF_ERROR(check_rank(ctx, in.rank()));
  if (out.numel() == 0) return ok_status();
  int64_t in_strides[kMaxDims];
  dense_strides(in.shape, in_strides);
  // Output dim d is (repeat, position) = [out/in, in] with strides [0, in's].
  Walk w;
  for (size_t d = 0; d < in.shape.size(); ++d) {
    w.push(out.shape[d] / in.shape[d], 0);
    w.push(in.shape[d], in_strides[d]);
  }
  strided_copy(dtype_size(in.dtype), in.data, out.data, w);
  return ok_status();
}

}  // namespace kiln
