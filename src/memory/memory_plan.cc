#include "memory/memory_plan.h"

#include <algorithm>
#include <map>
#include <numeric>

namespace kiln {

namespace {

size_t align_up(size_t n) { return (n + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment; }

bool lifetimes_intersect(const BufferLifetime& a, const BufferLifetime& b) {
  return a.first_step <= b.last_step && b.first_step <= a.last_step;
}

size_t lower_bound_of(const std::vector<BufferLifetime>& buffers) {
  // Sweep the steps: +bytes where a buffer starts, -bytes after it ends.
  std::map<int64_t, int64_t> delta;
  for (const auto& b : buffers) {
    delta[b.first_step] += int64_t(align_up(b.bytes));
    delta[b.last_step + 1] -= int64_t(align_up(b.bytes));
  }
  int64_t live = 0, most = 0;
  for (const auto& [step, d] : delta) {
    live += d;
    most = std::max(most, live);
  }
  return size_t(most);
}

}  // namespace

MemoryPlan memory_plan_greedy_by_size(const std::vector<BufferLifetime>& buffers) {
  MemoryPlan plan;
  plan.offsets.assign(buffers.size(), 0);
  for (const auto& b : buffers) plan.naive_bytes += align_up(b.bytes);
  plan.lower_bound_bytes = lower_bound_of(buffers);

  std::vector<size_t> order(buffers.size());
  std::iota(order.begin(), order.end(), 0);
  // Largest first; ties by earlier start, so the result is deterministic.
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (buffers[a].bytes != buffers[b].bytes) return buffers[a].bytes > buffers[b].bytes;
    return buffers[a].first_step < buffers[b].first_step;
  });

  std::vector<size_t> placed;
  for (size_t i : order) {
    const size_t size = align_up(buffers[i].bytes);
    // The placed buffers live at the same time as i, by offset.
    std::vector<std::pair<size_t, size_t>> busy;  // [offset, end)
    for (size_t j : placed)
      if (lifetimes_intersect(buffers[i], buffers[j]))
        busy.emplace_back(plan.offsets[j], plan.offsets[j] + align_up(buffers[j].bytes));
    std::sort(busy.begin(), busy.end());
    // Best fit: the smallest gap that holds it, else the end of the last.
    size_t best = SIZE_MAX, best_gap = SIZE_MAX, cursor = 0;
    for (const auto& [begin, end] : busy) {
      if (begin >= cursor && begin - cursor >= size && begin - cursor < best_gap) {
        best = cursor;
        best_gap = begin - cursor;
      }
      cursor = std::max(cursor, end);
    }
    plan.offsets[i] = best != SIZE_MAX ? best : cursor;
    plan.arena_bytes = std::max(plan.arena_bytes, plan.offsets[i] + size);
    placed.push_back(i);
  }
  return plan;
}

Status memory_plan_check(const std::vector<BufferLifetime>& buffers, const MemoryPlan& plan) {
  if (plan.offsets.size() != buffers.size())
    return internal_error("memory plan has {} offsets for {} buffers", plan.offsets.size(), buffers.size());
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (plan.offsets[i] % kArenaAlignment != 0)
      return internal_error("buffer {} at offset {} is not aligned", i, plan.offsets[i]);
    if (plan.offsets[i] + buffers[i].bytes > plan.arena_bytes)
      return internal_error("buffer {} ends past the arena ({} bytes)", i, plan.arena_bytes);
    for (size_t j = i + 1; j < buffers.size(); ++j) {
      if (!lifetimes_intersect(buffers[i], buffers[j])) continue;
      size_t a0 = plan.offsets[i], a1 = a0 + buffers[i].bytes;
      size_t b0 = plan.offsets[j], b1 = b0 + buffers[j].bytes;
      if (a0 < b1 && b0 < a1 && buffers[i].bytes && buffers[j].bytes)
        return internal_error("buffers {} and {} are live together and overlap at [{}, {})", i, j,
                              std::max(a0, b0), std::min(a1, b1));
    }
  }
  return ok_status();
}

}  // namespace kiln
