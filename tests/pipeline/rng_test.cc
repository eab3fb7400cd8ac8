// kiln's noise generator against its numpy twin (tools/kiln_rng.py), whose
// values are written out below: the same seed must give the same numbers in
// C++ and in the Python reference pipeline.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/rng.h"

namespace kiln {
namespace {

std::vector<float> draw(uint64_t seed, uint64_t first_pair, size_t n) {
  std::vector<float> out(n);
  NoiseStream(seed, first_pair).fill(out.data(), n);
  return out;
}

TEST(Rng, MatchesTheNumpyGenerator) {
  // /usr/bin/python3 -c "import kiln_rng; print(kiln_rng.normals(42, 0, 5))" (from tools/)
  const std::vector<float> want = {0.8822488784790039f, 1.3884732723236084f, -0.45084986090660095f,
                                   0.6707164645195007f, 0.18835262954235077f};
  const std::vector<float> got = draw(42, 0, 5);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6f) << i;
  // normals(42, 2, 3) starts at pair 2: the fifth value above, then its sine.
  const std::vector<float> later = draw(42, 2, 3);
  EXPECT_NEAR(later[0], 0.18835262954235077f, 1e-6f);
  EXPECT_NEAR(later[1], -0.2051040232181549f, 1e-6f);
  EXPECT_NEAR(later[2], 0.21958637237548828f, 1e-6f);
  const std::vector<float> high = draw(~uint64_t(0), 1000, 2);  // the seed wraps, as in numpy's uint64
  EXPECT_NEAR(high[0], 0.5210339426994324f, 1e-6f);
  EXPECT_NEAR(high[1], 1.2299039363861084f, 1e-6f);
}

TEST(Rng, StreamContinuesWhereTheLastDrawStopped) {
  NoiseStream stream(9);
  std::vector<float> a(6), b(4);
  stream.fill(a.data(), 5);  // an odd draw takes 3 pairs, dropping the last sine
  EXPECT_EQ(stream.next_pair(), 3u);
  stream.fill(b.data(), 4);
  const std::vector<float> direct = draw(9, 3, 4);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(b[i], direct[i]);
}

TEST(Rng, LooksStandardNormal) {
  const std::vector<float> v = draw(7, 0, 100000);
  double sum = 0, squares = 0;
  for (float x : v) sum += x, squares += double(x) * x;
  const double mean = sum / double(v.size()), var = squares / double(v.size()) - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.02);
  EXPECT_NEAR(std::sqrt(var), 1.0, 0.02);
}

}  // namespace
}  // namespace kiln
