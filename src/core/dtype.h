// Element types kiln tensors can hold, and the small helpers kernels need to
// dispatch on them. f16 and bf16 are stored as raw 16-bit patterns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace kiln {

// X(enum, name, c++ storage type, size)
#define KILN_DTYPES(X)               \
  X(kF32, "f32", float, 4)           \
  X(kF64, "f64", double, 8)          \
  X(kF16, "f16", ::kiln::f16, 2)     \
  X(kBF16, "bf16", ::kiln::bf16, 2)  \
  X(kI64, "i64", int64_t, 8)         \
  X(kI32, "i32", int32_t, 4)         \
  X(kI8, "i8", int8_t, 1)            \
  X(kU8, "u8", uint8_t, 1)           \
  X(kBool, "bool", bool, 1)

struct f16 {
  uint16_t bits;
};
struct bf16 {
  uint16_t bits;
};

enum class DType : uint8_t {
#define KILN_DTYPE_ENUM(e, name, type, size) e,
  KILN_DTYPES(KILN_DTYPE_ENUM)
#undef KILN_DTYPE_ENUM
};

size_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);
std::optional<DType> dtype_from_name(std::string_view name);
inline bool dtype_is_float(DType d) {
  return d == DType::kF32 || d == DType::kF64 || d == DType::kF16 || d == DType::kBF16;
}

template <typename T> constexpr DType dtype_of();
#define KILN_DTYPE_OF(e, name, type, size) \
  template <> constexpr DType dtype_of<type>() { return DType::e; }
KILN_DTYPES(KILN_DTYPE_OF)
#undef KILN_DTYPE_OF

// Round-to-nearest-even conversions (what ONNX and PyTorch casts do).
float f16_to_f32(f16 h);
f16 f32_to_f16(float f);
f16 f64_to_f16(double d);  // one rounding, not two through f32
inline float bf16_to_f32(bf16 b) {
  uint32_t bits = uint32_t(b.bits) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
// Branch-free (a NaN stays a quiet NaN), so loops over it vectorize.
inline bf16 f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const bool nan = (bits & 0x7FFFFFFFu) > 0x7F800000u;
  const uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  return bf16{uint16_t(nan ? (bits >> 16) | 0x40u : rounded)};
}

// Calls fn(T{}) with T the storage type of `dtype`.
template <typename Fn>
decltype(auto) dtype_visit(DType dtype, Fn&& fn) {
  switch (dtype) {
#define KILN_DTYPE_CASE(e, name, type, size) \
  case DType::e: return fn(type{});
    KILN_DTYPES(KILN_DTYPE_CASE)
#undef KILN_DTYPE_CASE
  }
  __builtin_unreachable();
}

}  // namespace kiln
