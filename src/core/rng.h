// kiln's noise: the one generator behind initial latents and ancestral
// noise, so that a seed gives the same image bit for bit in every mode and
// every run (tools/kiln_rng.py is the same generator in numpy).
//
// Counter-based: word k of the stream for `seed` is splitmix64's output for
// state seed + (k + 1) * 0x9E3779B97F4A7C15. Standard normals come in pairs
// from two words (Box-Muller in double): u = (word >> 11) * 2^-53,
// r = sqrt(-2 log(1 - u1)), z0 = r cos(2 pi u2), z1 = r sin(2 pi u2),
// rounded to float. A draw of n normals takes ceil(n / 2) pairs; an odd n
// drops the last sine.
//
//   NoiseStream noise(seed);
//   noise.fill(latents.data(), latents.size());  // pairs 0 .. ceil(n/2) - 1
//   noise.fill(step_noise.data(), n);            // the next ones
#pragma once

#include <cstddef>
#include <cstdint>

namespace kiln {

class NoiseStream {
 public:
  explicit NoiseStream(uint64_t seed, uint64_t first_pair = 0) : seed_(seed), pair_(first_pair) {}
  // n standard normals, then the stream moves past them.
  void fill(float* out, size_t n);
  uint64_t next_pair() const { return pair_; }

 private:
  uint64_t seed_, pair_;
};

}  // namespace kiln
