// cpu kernels for the creation ops (see kernels/kernel.h). These mostly make
// small shape tensors; only ConstantOfShape and Trilu (attention masks) touch
// sizeable memory, and both work on raw bytes for every dtype.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "kernels/kernel.h"

namespace kiln {

Status cpu_Shape(KernelContext& ctx) {
  const Shape& dims = ctx.input(0)->shape;
  const int64_t rank = int64_t(dims.size());
  const int64_t start_attr = ctx.attrs().get_int("start", 0);
  const int64_t start = std::clamp(start_attr < 0 ? start_attr + rank : start_attr, int64_t(0), rank);
  TensorView& y = *ctx.output(0);
  std::copy(dims.begin() + start, dims.begin() + start + y.numel(), y.as<int64_t>());
  return ok_status();
}

Status cpu_ConstantOfShape(KernelContext& ctx) {
  TensorView& y = *ctx.output(0);
  const Tensor* value = ctx.attrs().get_tensor("value");
  const size_t total = y.nbytes(), size = dtype_size(y.dtype);
  char* out = static_cast<char*>(y.data);
  if (total == 0) return ok_status();
  if (!value || std::all_of(static_cast<const char*>(value->raw()),
                            static_cast<const char*>(value->raw()) + size, [](char c) { return c == 0; })) {
    std::memset(out, 0, total);
    return ok_status();
  }
  // Copy the element once, then double the filled prefix.
  std::memcpy(out, value->raw(), size);
  for (size_t filled = size; filled < total; filled *= 2)
    std::memcpy(out + filled, out, std::min(filled, total - filled));
  return ok_status();
}

Status cpu_Range(KernelContext& ctx) {
  TensorView& y = *ctx.output(0);
  return dtype_visit(y.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
      // start + i * delta in double (no drift from repeated adds), or in
      // wrapping 64-bit integers: the result is in range, a partial product may not be.
      using Wide = std::conditional_t<std::is_floating_point_v<T>, double, uint64_t>;
      const Wide start = Wide(ctx.input(0)->as<T>()[0]), delta = Wide(ctx.input(2)->as<T>()[0]);
      T* out = y.as<T>();
      for (int64_t i = 0; i < y.numel(); ++i) out[i] = T(start + Wide(i) * delta);
      return ok_status();
    } else {
      return ctx.unsupported_error("dtype {}", dtype_name(y.dtype));
    }
  });
}

Status cpu_Trilu(KernelContext& ctx) {
  const TensorView& x = *ctx.input(0);
  const bool upper = ctx.attrs().get_int("upper", 1) != 0;
  const int64_t rows = x.shape[x.rank() - 2], cols = x.shape[x.rank() - 1];
  if (x.numel() == 0) return ok_status();
  // Diagonals past the matrix act like the edge one; clamping keeps i + k in range.
  const int64_t k = std::clamp(ctx.input(1) ? ctx.input(1)->as<int64_t>()[0] : int64_t(0), -rows, cols);
  const size_t size = dtype_size(x.dtype);
  const char* in = static_cast<const char*>(x.data);
  char* out = static_cast<char*>(ctx.output(0)->data);
  for (int64_t row = 0; row < x.numel() / cols; ++row) {
    // upper keeps columns j >= i + k, lower keeps j <= i + k.
    const int64_t i = row % rows;
    const int64_t split = std::clamp(upper ? i + k : i + k + 1, int64_t(0), cols);
    const int64_t keep_from = upper ? split : 0, keep_to = upper ? cols : split;
    const size_t base = size_t(row * cols) * size;
    std::memset(out + base, 0, size_t(cols) * size);
    std::memcpy(out + base + size_t(keep_from) * size, in + base + size_t(keep_from) * size,
                size_t(keep_to - keep_from) * size);
  }
  return ok_status();
}

}  // namespace kiln
