#include "core/rng.h"

#include <cmath>
#include <numbers>

namespace kiln {

namespace {

uint64_t word(uint64_t seed, uint64_t k) {
  uint64_t z = seed + (k + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double unit(uint64_t w) { return double(w >> 11) * 0x1.0p-53; }

}  // namespace

void NoiseStream::fill(float* out, size_t n) {
  for (size_t i = 0; i < n; i += 2, ++pair_) {
    const double u1 = unit(word(seed_, 2 * pair_)), u2 = unit(word(seed_, 2 * pair_ + 1));
    const double r = std::sqrt(-2.0 * std::log1p(-u1)), angle = 2.0 * std::numbers::pi * u2;
    out[i] = float(r * std::cos(angle));
    if (i + 1 < n) out[i + 1] = float(r * std::sin(angle));
  }
}

}  // namespace kiln
