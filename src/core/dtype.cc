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

// Bit-level IEEE half conversions (portable: no _Float16, no F16C needed).
float f16_to_f32(f16 h) {
  const uint32_t sign = uint32_t(h.bits & 0x8000) << 16;
  const uint32_t exponent = (h.bits >> 10) & 0x1f, mantissa = h.bits & 0x3ff;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in f32
    float f = std::ldexp(float(mantissa), -24);
    return sign ? -f : f;
  }
  uint32_t bits = exponent == 31 ? sign | 0x7f800000 | mantissa << 13           // inf, NaN
                                 : sign | (exponent + 112) << 23 | mantissa << 13;  // rebias 15 -> 127
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

f16 f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000);
  const uint32_t abs = x & 0x7fffffff;
  if (abs >= 0x7f800000) return f16{uint16_t(sign | (abs > 0x7f800000 ? 0x7e00 : 0x7c00))};
  if (abs >= 0x477ff000) return f16{uint16_t(sign | 0x7c00)};  // >= 65520 rounds to inf
  if (abs < 0x38800000) {  // below 2^-14: a half subnormal; scaling by 2^24 is exact
    float magnitude;
    std::memcpy(&magnitude, &abs, 4);
    return f16{uint16_t(sign | uint32_t(std::nearbyint(std::ldexp(magnitude, 24))))};
  }
  const uint32_t rounded = abs + 0xfff + ((abs >> 13) & 1);  // round to nearest even
  return f16{uint16_t(sign | ((rounded - 0x38000000) >> 13))};
}

f16 f64_to_f16(double d) {
  // Round to f32 with "round to odd" (truncate, then set the last bit if
  // anything was cut off): f32 keeps 13 more bits than f16, so the second
  // rounding, to nearest even, then gives the correctly rounded half.
  float f = static_cast<float>(d);
  if (std::isfinite(d) && static_cast<double>(f) != d) {
    if (std::abs(static_cast<double>(f)) > std::abs(d)) f = std::nextafter(f, 0.0f);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    bits |= 1;
    std::memcpy(&f, &bits, 4);
  }
  return f32_to_f16(f);
}

}  // namespace kiln
