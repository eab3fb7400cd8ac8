// ref kernels for the creation ops (see kernels/kernel.h).
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "kernels/kernel.h"

namespace kiln {

Status ref_Shape(KernelContext& ctx) {
  const Shape& dims = ctx.input(0)->shape;
  const int64_t rank = int64_t(dims.size());
  int64_t start = ctx.attrs().get_int("start", 0);
  if (start < 0) start += rank;
  start = std::clamp(start, int64_t(0), rank);
  TensorView& y = *ctx.output(0);
  for (int64_t i = 0; i < y.numel(); ++i) y.as<int64_t>()[i] = dims[size_t(start + i)];
  return ok_status();
}

Status ref_ConstantOfShape(KernelContext& ctx) {
  const Tensor* value = ctx.attrs().get_tensor("value");
  TensorView& y = *ctx.output(0);
  const size_t size = dtype_size(y.dtype);
  for (int64_t i = 0; i < y.numel(); ++i) {
    char* at = static_cast<char*>(y.data) + size_t(i) * size;
    if (value) std::memcpy(at, value->raw(), size);
    else std::memset(at, 0, size);  // the default, f32 0
  }
  return ok_status();
}

Status ref_Range(KernelContext& ctx) {
  TensorView& y = *ctx.output(0);
  return dtype_visit(y.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
      const long double start = ctx.input(0)->as<T>()[0], delta = ctx.input(2)->as<T>()[0];
      for (int64_t i = 0; i < y.numel(); ++i) y.as<T>()[i] = T(start + i * delta);
      return ok_status();
    } else {
      return ctx.unsupported_error("dtype {}", dtype_name(y.dtype));
    }
  });
}

Status ref_Trilu(KernelContext& ctx) {
  const TensorView& x = *ctx.input(0);
  const int64_t k = ctx.input(1) ? ctx.input(1)->as<int64_t>()[0] : 0;
  const bool upper = ctx.attrs().get_int("upper", 1) != 0;
  const int64_t rows = x.shape[x.rank() - 2], cols = x.shape[x.rank() - 1];
  const size_t size = dtype_size(x.dtype);
  for (int64_t e = 0; e < x.numel(); ++e) {
    const int64_t i = (e / cols) % rows, j = e % cols;
    const bool keep = upper ? j - i >= k : j - i <= k;
    char* out = static_cast<char*>(ctx.output(0)->data) + size_t(e) * size;
    if (keep) std::memcpy(out, static_cast<const char*>(x.data) + size_t(e) * size, size);
    else std::memset(out, 0, size);
  }
  return ok_status();
}

}  // namespace kiln
