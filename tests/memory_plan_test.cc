#include "memory/memory_plan.h"

#include <gtest/gtest.h>

#include <random>

namespace kiln {
namespace {

TEST(MemoryPlan, ReusesMemoryOfDeadBuffers) {
  // A chain: each buffer is read only by the next step.
  std::vector<BufferLifetime> chain;
  for (int i = 0; i < 8; ++i) chain.push_back({i, i + 1, 1000});
  MemoryPlan plan = memory_plan_greedy_by_size(chain);
  ASSERT_TRUE(memory_plan_check(chain, plan).ok());
  EXPECT_EQ(plan.naive_bytes, 8 * 1024u);
  EXPECT_EQ(plan.lower_bound_bytes, 2 * 1024u);
  EXPECT_EQ(plan.arena_bytes, 2 * 1024u);  // ping-pong between two slots
}

TEST(MemoryPlan, CheckCatchesOverlaps) {
  std::vector<BufferLifetime> buffers = {{0, 2, 128}, {1, 3, 128}};
  MemoryPlan bad;
  bad.offsets = {0, 64};
  bad.arena_bytes = 192;
  Status s = memory_plan_check(buffers, bad);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("buffers 0 and 1 are live together"), std::string::npos) << s.message();
  bad.offsets = {0, 128};
  bad.arena_bytes = 256;
  EXPECT_TRUE(memory_plan_check(buffers, bad).ok());
}

// Random lifetimes: never an overlap, never below the lower bound, and close
// to it (greedy by size is within a few percent on such inputs).
TEST(MemoryPlan, RandomLifetimesAreValid) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<BufferLifetime> buffers;
    int n = 5 + int(rng() % 120);
    for (int i = 0; i < n; ++i) {
      int64_t first = rng() % 200, len = rng() % 20;
      buffers.push_back({first, first + len, size_t(1 + rng() % 100000)});
    }
    MemoryPlan plan = memory_plan_greedy_by_size(buffers);
    Status s = memory_plan_check(buffers, plan);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_GE(plan.arena_bytes, plan.lower_bound_bytes);
    EXPECT_LE(plan.arena_bytes, plan.naive_bytes);
  }
}

}  // namespace
}  // namespace kiln
