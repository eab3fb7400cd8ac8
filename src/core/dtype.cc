#include "core/dtype.h"

#include <cmath>

namespace kiln {

size_t dtype_size(DType dtype) {
  switch (dtype) {
#define KILN_DTYPE_SIZE(e, name, type, size) \
  case DType::e: return size;
    KILN_DTYPES(KILN_DTYPE_SIZE)
#undef KILN_DTYPE_SIZE
  }
  return 0;
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
#define KILN_DTYPE_NAME(e, name, type, size) \
  case DType::e: return name;
    KILN_DTYPES(KILN_DTYPE_NAME)
#undef KILN_DTYPE_NAME
  }
  return "?";
}

std::optional<DType> dtype_from_name(std::string_view n) {
#define KILN_DTYPE_FROM(e, name, type, size) \
  if (n == name) return DType::e;
  KILN_DTYPES(KILN_DTYPE_FROM)
#undef KILN_DTYPE_FROM
  return std::nullopt;
}

// _Float16 (g++ >= 12 on x86-64) converts with correct rounding, in hardware
// (F16C) where the CPU has it.
float f16_to_f32(f16 h) {
  _Float16 v;
  std::memcpy(&v, &h.bits, 2);
  return static_cast<float>(v);
}

f16 f32_to_f16(float f) {
  _Float16 v = static_cast<_Float16>(f);
  f16 h;
  std::memcpy(&h.bits, &v, 2);
  return h;
}

bf16 f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (std::isnan(f)) return bf16{uint16_t((bits >> 16) | 0x40)};  // stay a (quiet) NaN
  uint32_t rounding = 0x7FFF + ((bits >> 16) & 1);
  return bf16{uint16_t((bits + rounding) >> 16)};
}

}  // namespace kiln
