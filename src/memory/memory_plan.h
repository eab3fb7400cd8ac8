// Arena memory planning: every intermediate tensor of a compiled plan gets an
// offset in one arena, so a run allocates nothing.
//
// The plan is plain data, independent of graphs and kernels: each buffer is a
// size and a lifetime [first_step, last_step] over the execution order. Two
// buffers whose lifetimes intersect never overlap in the arena.
//
//   std::vector<BufferLifetime> buffers = {{0, 2, 4096}, {1, 3, 1024}, {3, 4, 4096}};
//   MemoryPlan plan = memory_plan_greedy_by_size(buffers);
//   assert(memory_plan_check(buffers, plan).ok());
//   float* p = reinterpret_cast<float*>(arena + plan.offsets[2]);
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/status.h"

namespace kiln {

struct BufferLifetime {
  int64_t first_step;  // the step that writes it
  int64_t last_step;   // the last step that reads it (inclusive)
  size_t bytes;
};

struct MemoryPlan {
  std::vector<size_t> offsets;   // per buffer, aligned
  size_t arena_bytes = 0;        // the arena size the offsets need
  size_t naive_bytes = 0;        // sum of all buffers: one allocation each, never reused
  size_t lower_bound_bytes = 0;  // most bytes live at any one step: no plan can do better
};

inline constexpr size_t kArenaAlignment = 64;

// Places the largest buffers first, each at the lowest offset that does not
// overlap a placed buffer with an intersecting lifetime (the greedy-by-size
// strategy of TFLite's and XNNPACK's planners). O(n^2) in the buffer count.
MemoryPlan memory_plan_greedy_by_size(const std::vector<BufferLifetime>& buffers);

// An error naming the first pair of live buffers that overlap, or a buffer
// past the arena's end.
Status memory_plan_check(const std::vector<BufferLifetime>& buffers, const MemoryPlan& plan);

}  // namespace kiln
