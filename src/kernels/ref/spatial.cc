// ref kernels for the spatial ops (see kernels/kernel.h).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/spatial_params.h"
#include "kernels/kernel.h"

namespace kiln {

namespace {

// Multi-index of flat index i in row-major `shape`.
std::vector<int64_t> unravel(int64_t i, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t a = shape.size(); a-- > 0;) {
    idx[a] = i % shape[a];
    i /= shape[a];
  }
  return idx;
}

int64_t ravel(const std::vector<int64_t>& idx, const Shape& shape) {
  int64_t flat = 0;
  for (size_t a = 0; a < shape.size(); ++a) flat = flat * shape[a] + idx[a];
  return flat;
}

}  // namespace

Status ref_Pad(KernelContext& ctx) {
  const TensorView& x = *ctx.input(0);
  TensorView& y = *ctx.output(0);
  if (y.numel() == 0) return ok_status();
  KILN_ASSIGN_OR_RETURN(PadParams p, pad_params_decode(ctx));
  const size_t esize = dtype_size(x.dtype);
  for (int64_t i = 0; i < y.numel(); ++i) {
    std::vector<int64_t> idx = unravel(i, y.shape);
    bool fill = false;
    for (size_t a = 0; a < idx.size(); ++a) {
      idx[a] = pad_source_index(p.mode, idx[a], p.begin[a], x.shape[a], p.end[a]);
      fill = fill || idx[a] < 0;
    }
    char* dst = static_cast<char*>(y.data) + size_t(i) * esize;
    const void* src = fill ? static_cast<const void*>(&p.fill_bits)
                           : static_cast<const char*>(x.data) + size_t(ravel(idx, x.shape)) * esize;
    std::memcpy(dst, src, esize);
  }
  return ok_status();
}

Status ref_Resize(KernelContext& ctx) {
  const TensorView& x = *ctx.input(0);
  TensorView& y = *ctx.output(0);
  if (y.numel() == 0) return ok_status();
  if (x.numel() == 0)
    return invalid_argument("{}: resizing an empty tensor", node_label(*ctx.node));
  KILN_ASSIGN_OR_RETURN(ResizeParams p, resize_params_decode(ctx));
  const size_t rank = x.shape.size();
  const size_t esize = dtype_size(x.dtype);
  if (p.linear && x.dtype != DType::kF32)
    return ctx.unsupported_error("linear mode on {}", dtype_name(x.dtype));
  for (int64_t i = 0; i < y.numel(); ++i) {
    const std::vector<int64_t> out_idx = unravel(i, y.shape);
    std::vector<double> src(rank);
    bool outside = false;
    for (size_t a = 0; a < rank && !outside; ++a) {
      auto c = resize_source_coord(p, int(a), out_idx[a], x.shape[a], y.shape[a]);
      outside = !c;
      if (c) src[a] = *c;
    }
    if (!p.linear) {
      std::vector<int64_t> idx(rank);
      for (size_t a = 0; a < rank && !outside; ++a)
        idx[a] = resize_nearest_index(p.nearest, src[a], x.shape[a]);
      char* dst = static_cast<char*>(y.data) + size_t(i) * esize;
      if (outside) {
        std::memcpy(dst, &p.extrapolation_bits, esize);
      } else {
        std::memcpy(dst, static_cast<const char*>(x.data) + size_t(ravel(idx, x.shape)) * esize,
                    esize);
      }
      continue;
    }
    if (outside) {
      y.as<float>()[i] = float(p.extrapolation);
      continue;
    }
    // n-linear: sum over the 2^rank corners of the cell around src.
    double acc = 0;
    for (uint64_t corner = 0; corner < (uint64_t(1) << rank); ++corner) {
      std::vector<int64_t> idx(rank);
      double weight = 1;
      for (size_t a = 0; a < rank; ++a) {
        const double lo = std::floor(src[a]), frac = src[a] - lo;
        const bool upper = (corner >> a) & 1;
        weight *= upper ? frac : 1 - frac;
        idx[a] = std::clamp<int64_t>(int64_t(lo) + upper, 0, x.shape[a] - 1);
      }
      if (weight != 0) acc += weight * double(x.as<float>()[ravel(idx, x.shape)]);
    }
    y.as<float>()[i] = float(acc);
  }
  return ok_status();
}

}  // namespace kiln
