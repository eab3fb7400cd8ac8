// cpu kernels for the spatial ops (see kernels/kernel.h).
//
// Both ops walk the output as rows along the last axis. Per-axis tables (in
// workspace scratch) say which input index each output index reads, so the
// inner loops are copies and gathers; OpenMP splits the rows.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/parallel.h"
#include "kernels/spatial_params.h"
#include "kernels/kernel.h"

namespace kiln {

namespace {

// Below this many output bytes a thread team costs more than it saves.
constexpr int64_t kParallelBytes = int64_t(1) << 16;

// Calls fn(T{}) with T an unsigned integer as wide as one element: Pad and
// nearest Resize only move elements, so they dispatch on size, not dtype.
template <typename Fn>
void visit_element_bits(DType dtype, Fn&& fn) {
  switch (dtype_size(dtype)) {
    case 1: return fn(uint8_t{});
    case 2: return fn(uint16_t{});
    case 4: return fn(uint32_t{});
    default: return fn(uint64_t{});
  }
}

template <typename T>
T bits_as(uint64_t bits) {
  T t;
  std::memcpy(&t, &bits, sizeof(T));
  return t;
}

// Scratch for `count` T; nullptr when the workspace cannot give it.
template <typename T>
T* scratch_array(KernelContext& ctx, int64_t count) {
  if (!ctx.workspace) return nullptr;
  return static_cast<T*>(ctx.workspace->scratch(size_t(std::max<int64_t>(count, 1)) * sizeof(T)));
}

// Inside a parallel region: calls fn(row, idx) for this thread's contiguous
// share of `rows`, idx being the row's multi-index over dims[0..rank).
template <typename Fn>
void for_thread_rows(const int64_t* dims, int rank, int64_t rows, Fn&& fn) {
  const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
  const int64_t first = rows * t / threads, last = rows * (t + 1) / threads;
  std::array<int64_t, kSpatialMaxRank> idx{};
  for (int64_t a = rank - 1, rest = first; a >= 0; --a) {
    idx[size_t(a)] = rest % dims[a];
    rest /= dims[a];
  }
  for (int64_t row = first; row < last; ++row) {
    fn(row, idx);
    for (int a = rank - 1; a >= 0 && ++idx[size_t(a)] == dims[a]; --a) idx[size_t(a)] = 0;
  }
}

// ---- Pad ----

template <typename T>
void pad_rows(const PadParams& p, const TensorView& x, TensorView& y, int64_t* const* src_of) {
  const int last = int(y.rank()) - 1;
  const int64_t out_w = y.shape[size_t(last)], in_w = x.shape[size_t(last)];
  const int64_t lo = std::max<int64_t>(p.begin[size_t(last)], 0);
  const int64_t crop = std::max<int64_t>(-p.begin[size_t(last)], 0);
  const int64_t kept = in_w - crop - std::max<int64_t>(-p.end[size_t(last)], 0);
  const T fill = bits_as<T>(p.fill_bits);
  const T* in = x.as<T>();
  T* out = y.as<T>();
  const int64_t* last_src = src_of[last];
  parallel_region(int64_t(y.nbytes()) >= kParallelBytes, [&] {
    for_thread_rows(y.shape.data(), last, y.numel() / out_w, [&](int64_t row, const auto& idx) {
      T* dst = out + row * out_w;
      int64_t src_row = 0;
      for (int a = 0; a < last; ++a) {
        const int64_t s = src_of[a][idx[size_t(a)]];
        if (s < 0) {
          std::fill_n(dst, out_w, fill);
          return;
        }
        src_row = src_row * x.shape[size_t(a)] + s;
      }
      const T* src = in + src_row * in_w;
      for (int64_t o = 0; o < lo; ++o) dst[o] = last_src[o] < 0 ? fill : src[last_src[o]];
      if (kept > 0) std::memcpy(dst + lo, src + crop, size_t(kept) * sizeof(T));
      for (int64_t o = lo + kept; o < out_w; ++o) dst[o] = last_src[o] < 0 ? fill : src[last_src[o]];
    });
  });
}

// ---- Resize, nearest ----

enum class RowKind { kCopy, kDouble, kGather };

// How the last-axis table maps a row: a copy, each element twice (the 2x
// upsample of SD's decoders), or a general gather.
RowKind classify_row(const int64_t* src, int64_t out_w, int64_t in_w) {
  bool copy = out_w == in_w, twice = out_w == 2 * in_w;
  for (int64_t o = 0; o < out_w && (copy || twice); ++o) {
    copy = copy && src[o] == o;
    twice = twice && src[o] == o / 2;
  }
  return copy ? RowKind::kCopy : twice ? RowKind::kDouble : RowKind::kGather;
}

template <typename T>
void gather_row(RowKind kind, const T* in, T* out, const int64_t* src, int64_t out_w, T fill) {
  switch (kind) {
    case RowKind::kCopy: std::memcpy(out, in, size_t(out_w) * sizeof(T)); return;
    case RowKind::kDouble:
      for (int64_t i = 0; i < out_w / 2; ++i) out[2 * i] = out[2 * i + 1] = in[i];
      return;
    case RowKind::kGather:
      for (int64_t o = 0; o < out_w; ++o) out[o] = src[o] < 0 ? fill : in[src[o]];
      return;
  }
}

// Output dims (and the matching input dims) seen as [planes..., rows, row]:
// ranks below 2 get leading 1s.
struct RowShape {
  int rank = 0;
  std::array<int64_t, kSpatialMaxRank> in{}, out{};
  int offset = 0;  // leading 1s added
};

RowShape row_shape(const TensorView& x, const TensorView& y) {
  RowShape s;
  s.rank = std::max<int>(int(x.rank()), 2);
  s.offset = s.rank - int(x.rank());
  for (int a = 0; a < s.rank; ++a) {
    s.in[size_t(a)] = a < s.offset ? 1 : x.shape[size_t(a - s.offset)];
    s.out[size_t(a)] = a < s.offset ? 1 : y.shape[size_t(a - s.offset)];
  }
  return s;
}

template <typename T>
void resize_nearest(const ResizeParams& p, const RowShape& s, const T* in, T* out,
                    int64_t* const* src, const int64_t* run_start, int64_t runs, bool parallel) {
  const int rows_axis = s.rank - 2, last = s.rank - 1;
  const int64_t out_w = s.out[size_t(last)], in_w = s.in[size_t(last)];
  const int64_t out_rows = s.out[size_t(rows_axis)], in_rows = s.in[size_t(rows_axis)];
  int64_t planes = 1;
  for (int a = 0; a < rows_axis; ++a) planes *= s.out[size_t(a)];
  const RowKind kind = classify_row(src[last], out_w, in_w);
  const T fill = bits_as<T>(p.extrapolation_bits);
  // One task per run of output rows that read the same input row: gather it
  // once, copy it to the rest of the run.
  parallel_for(planes * runs, parallel, [&](int64_t task) {
    const int64_t plane = task / runs, run = task % runs;
    int64_t src_plane = 0;
    bool outside = false;
    int64_t rest = plane, stride = 1;
    for (int a = rows_axis - 1; a >= 0; --a) {
      const int64_t s_a = src[a][rest % s.out[size_t(a)]];
      rest /= s.out[size_t(a)];
      outside = outside || s_a < 0;
      src_plane += s_a * stride;
      stride *= s.in[size_t(a)];
    }
    const int64_t first = run_start[run], end = run + 1 < runs ? run_start[run + 1] : out_rows;
    const int64_t src_row = src[rows_axis][first];
    T* dst = out + (plane * out_rows + first) * out_w;
    if (outside || src_row < 0)
      std::fill_n(dst, out_w, fill);
    else
      gather_row(kind, in + (src_plane * in_rows + src_row) * in_w, dst, src[last], out_w, fill);
    for (int64_t r = first + 1; r < end; ++r)
      std::memcpy(dst + (r - first) * out_w, dst, size_t(out_w) * sizeof(T));
  });
}

Status cpu_resize_nearest(KernelContext& ctx, const ResizeParams& p, const RowShape& s) {
  const TensorView& x = *ctx.input(0);
  TensorView& y = *ctx.output(0);
  int64_t table_len = 0;
  for (int a = 0; a < s.rank; ++a) table_len += s.out[size_t(a)];
  const int rows_axis = s.rank - 2;
  int64_t* tables = scratch_array<int64_t>(ctx, table_len + s.out[size_t(rows_axis)]);
  if (!tables) return resource_exhausted("{}: no scratch for index tables", node_label(*ctx.node));
  std::array<int64_t*, kSpatialMaxRank> src{};
  int64_t* next = tables;
  for (int a = 0; a < s.rank; ++a) {
    src[size_t(a)] = next;
    for (int64_t o = 0; o < s.out[size_t(a)]; ++o) {
      auto c = a < s.offset
                   ? std::optional<double>(0)
                   : resize_source_coord(p, a - s.offset, o, s.in[size_t(a)], s.out[size_t(a)]);
      next[o] = c ? resize_nearest_index(p.nearest, *c, s.in[size_t(a)]) : -1;
    }
    next += s.out[size_t(a)];
  }
  int64_t* run_start = next;
  int64_t runs = 0;
  for (int64_t o = 0; o < s.out[size_t(rows_axis)]; ++o)
    if (o == 0 || src[size_t(rows_axis)][o] != src[size_t(rows_axis)][o - 1]) run_start[runs++] = o;
  const bool parallel = int64_t(y.nbytes()) >= kParallelBytes;
  visit_element_bits(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    resize_nearest(p, s, x.as<T>(), y.as<T>(), src.data(), run_start, runs, parallel);
  });
  return ok_status();
}

// ---- Resize, linear ----

// Per output index of one axis: the two input offsets (elements) it blends
// and the weight of the second; a NaN weight marks an extrapolated index
// (its offsets are 0, so reading them stays in bounds).
struct LinearTable {
  int64_t* off0;
  int64_t* off1;
  float* w1;
};

Status cpu_resize_linear(KernelContext& ctx, const ResizeParams& p, const RowShape& s) {
  const TensorView& x = *ctx.input(0);
  TensorView& y = *ctx.output(0);
  int64_t table_len = 0;
  for (int a = 0; a < s.rank; ++a) table_len += s.out[size_t(a)];
  int64_t* offsets = scratch_array<int64_t>(ctx, 2 * table_len);
  float* weights = scratch_array<float>(ctx, table_len);
  if (!offsets || !weights)
    return resource_exhausted("{}: no scratch for weight tables", node_label(*ctx.node));
  std::array<LinearTable, kSpatialMaxRank> tables{};
  bool extrapolates = false;
  int64_t used = 0, stride = 1;
  for (int a = s.rank - 1; a >= 0; --a) {
    const int64_t n = s.out[size_t(a)], in_len = s.in[size_t(a)];
    LinearTable& t = tables[size_t(a)];
    t = {offsets + 2 * used, offsets + 2 * used + n, weights + used};
    for (int64_t o = 0; o < n; ++o) {
      auto c = a < s.offset ? std::optional<double>(0)
                            : resize_source_coord(p, a - s.offset, o, in_len, n);
      extrapolates = extrapolates || !c;
      const double lo = c ? std::floor(*c) : 0;
      t.off0[o] = c ? std::clamp<int64_t>(int64_t(lo), 0, in_len - 1) * stride : 0;
      t.off1[o] = c ? std::clamp<int64_t>(int64_t(lo) + 1, 0, in_len - 1) * stride : 0;
      t.w1[o] = c ? float(*c - lo) : NAN;
    }
    used += n;
    stride *= in_len;
  }
  const int last = s.rank - 1;
  const int64_t out_w = s.out[size_t(last)];
  const LinearTable row_t = tables[size_t(last)];
  const float* in = x.as<float>();
  float* out = y.as<float>();
  const float fill = float(p.extrapolation);
  parallel_region(int64_t(y.nbytes()) >= kParallelBytes, [&] {
    for_thread_rows(s.out.data(), last, y.numel() / out_w, [&](int64_t row, const auto& idx) {
      float* dst = out + row * out_w;
      // The row blends up to 2^(rank-1) input rows: one per corner of the
      // cell the outer axes sample.
      std::array<int64_t, (1 << (kSpatialMaxRank - 1))> base;
      std::array<float, (1 << (kSpatialMaxRank - 1))> base_w;
      int corners = 1;
      base[0] = 0;
      base_w[0] = 1;
      for (int a = 0; a < last; ++a) {
        const LinearTable& t = tables[size_t(a)];
        const int64_t o = idx[size_t(a)];
        if (std::isnan(t.w1[o])) {
          std::fill_n(dst, out_w, fill);
          return;
        }
        const float w = t.w1[o];
        for (int c = 0; c < corners; ++c) {
          if (w != 0) {
            base[size_t(corners + c)] = base[size_t(c)] + t.off1[o];
            base_w[size_t(corners + c)] = base_w[size_t(c)] * w;
            base_w[size_t(c)] *= 1 - w;
          }
          base[size_t(c)] += t.off0[o];
        }
        if (w != 0) corners *= 2;
      }
      for (int c = 0; c < corners; ++c) {
        const float* src = in + base[size_t(c)];
        const float wc = base_w[size_t(c)];
        for (int64_t o = 0; o < out_w; ++o) {
          const float w1 = row_t.w1[o];
          const float v = wc * ((1 - w1) * src[row_t.off0[o]] + w1 * src[row_t.off1[o]]);
          dst[o] = c == 0 ? v : dst[o] + v;
        }
      }
      if (extrapolates)
        for (int64_t o = 0; o < out_w; ++o)
          if (std::isnan(row_t.w1[o])) dst[o] = fill;
    });
  });
  return ok_status();
}

}  // namespace

Status cpu_Pad(KernelContext& ctx) {
  const TensorView& x = *ctx.input(0);
  TensorView& y = *ctx.output(0);
  if (y.numel() == 0) return ok_status();
  KILN_ASSIGN_OR_RETURN(PadParams p, pad_params_decode(ctx));
  const size_t esize = dtype_size(x.dtype);
  if (y.rank() == 0) {
    std::memcpy(y.data, x.data, esize);
    return ok_status();
  }
  int64_t table_len = 0;
  for (int64_t d : y.shape) table_len += d;
  int64_t* tables = scratch_array<int64_t>(ctx, table_len);
  if (!tables) return resource_exhausted("{}: no scratch for index tables", node_label(*ctx.node));
  std::array<int64_t*, kSpatialMaxRank> src_of{};
  for (size_t a = 0; a < y.shape.size(); ++a) {
    src_of[a] = tables;
    for (int64_t o = 0; o < y.shape[a]; ++o)
      tables[o] = pad_source_index(p.mode, o, p.begin[a], x.shape[a], p.end[a]);
    tables += y.shape[a];
  }
  visit_element_bits(x.dtype, [&](auto tag) { pad_rows<decltype(tag)>(p, x, y, src_of.data()); });
  return ok_status();
}

Status cpu_Resize(KernelContext& ctx) {
  const TensorView& x = *ctx.input(0);
  TensorView& y = *ctx.output(0);
  if (y.numel() == 0) return ok_status();
  if (x.numel() == 0)
    return invalid_argument("{}: resizing an empty tensor", node_label(*ctx.node));
  KILN_ASSIGN_OR_RETURN(ResizeParams p, resize_params_decode(ctx));
  const RowShape s = row_shape(x, y);
  if (!p.linear) return cpu_resize_nearest(ctx, p, s);
  if (x.dtype != DType::kF32)
    return ctx.unsupported_error("linear mode on {}", dtype_name(x.dtype));
  return cpu_resize_linear(ctx, p, s);
}

}  // namespace kiln
