// Loops on the OpenMP pool that oneDNN also uses (one pool, never
// oversubscribed).
//
// An OpenMP region costs about a microsecond even when its `if` clause is
// false (and with one thread libgomp allocates a team for each), too much for
// the shape arithmetic on a few elements that exported models are full of,
// so these helpers skip OpenMP entirely for small work or a single thread.
// Never write `#pragma omp parallel ... if (...)` in a kernel: use these.
//
//   parallel_for(rows, rows * n >= kParallelMinElements, [&](int64_t r) { ... });
//   parallel_for<Schedule::kDynamic>(points, big, [&](int64_t p) { ... });  // handed out as threads free up
//   parallel_shares(tasks, big, [&](int64_t t) { ... });  // static shares, the idle help the late
//   parallel_ranges(n, big, [&](int64_t begin, int64_t end) { ... });
//   parallel_region(big, [&] { ... omp_get_thread_num() ... });
#pragma once

#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace kiln {

// Bytes from one thread's scratch slot to the next, for slots of `bytes`:
// whole 4 KiB pages and a 16 KiB gap. Threads whose slots end and start
// within a few KiB of each other slow each other down (likely each core's
// prefetchers running ahead of its own writes into lines the other is
// writing); 16 KiB apart, they no longer do (measurements:
// docs/performance.md#thread-scratch-slots).
inline constexpr size_t thread_slot_bytes(size_t bytes) { return (bytes + 4095) / 4096 * 4096 + 16384; }
// The same in elements of T, for slots of `count`.
template <class T>
inline constexpr int64_t thread_slot(int64_t count) {
  return int64_t(thread_slot_bytes(size_t(count) * sizeof(T)) / sizeof(T));
}

// Below this many elements touched, a kernel runs on the calling thread.
inline constexpr int64_t kParallelMinElements = int64_t(1) << 15;

inline bool worth_threads(bool parallel) { return parallel && omp_get_max_threads() > 1; }

// fn() on every thread of a team when `parallel`, else once on this thread.
template <class Fn>
inline void parallel_region(bool parallel, const Fn& fn) {
  if (!worth_threads(parallel)) return fn();
#pragma omp parallel
  fn();
}

// How parallel_for hands out its tasks: in equal contiguous shares, or each
// thread taking the next task as it frees up (for equal, independent tasks of
// tens of microseconds or more, where a thread the machine delays should not
// be left a fixed share).
enum class Schedule { kStatic, kDynamic };

// fn(t) for t in [0, tasks), split across threads when `parallel`.
template <Schedule kSchedule = Schedule::kStatic, class Fn>
inline void parallel_for(int64_t tasks, bool parallel, const Fn& fn) {
  if (!worth_threads(parallel) || tasks < 2) {
    for (int64_t t = 0; t < tasks; ++t) fn(t);
  } else if constexpr (kSchedule == Schedule::kDynamic) {
#pragma omp parallel for schedule(dynamic)
    for (int64_t t = 0; t < tasks; ++t) fn(t);
  } else {
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < tasks; ++t) fn(t);
  }
}

// One thread's share of a loop's tasks, handed out from both ends: its owner
// walks them from the front, in the order that reuses its caches; a thread
// done with its own share takes them from the back, so that a thread the
// machine delays (a shared host's other work, an interrupt) does not hold
// the whole loop up. front and back share one atomic word, so a task is never
// taken twice. (Measured on gemm.cc's tiles, on a quiet host and beside a busy
// neighbour: docs/performance.md#work-sharing.)
class ShareQueue {
 public:
  void reset(int64_t tasks) { taken_.store(0, std::memory_order_relaxed), tasks_ = tasks; }
  // The next task's index in the share, or -1 when none is left.
  int64_t take(bool owner) {
    uint64_t now = taken_.load(std::memory_order_relaxed);
    for (;;) {
      const int64_t front = int64_t(now >> 32), back = int64_t(now & 0xFFFFFFFFu);
      if (front + back >= tasks_) return -1;
      const uint64_t next = owner ? now + (uint64_t(1) << 32) : now + 1;
      if (taken_.compare_exchange_weak(now, next, std::memory_order_relaxed)) return owner ? front : tasks_ - 1 - back;
    }
  }

 private:
  alignas(64) std::atomic<uint64_t> taken_{0};  // front << 32 | back
  int64_t tasks_ = 0;
};

// fn(share, t) for every task t of each of `team` shares (queues reset to
// their sizes) on a team of threads: thread i drains share i, then the
// others' (ShareQueue). A team smaller than `team` (a nested region gets one
// thread) still covers every share.
template <class Fn>
inline void drain_shares(ShareQueue* queues, int64_t team, const Fn& fn) {
  parallel_region(true, [&] {
    const int64_t own = omp_get_thread_num() % team;
    for (int64_t k = 0; k < team; ++k) {
      const int64_t share = (own + k) % team;
      for (int64_t t; (t = queues[share].take(k == 0 && omp_get_thread_num() < team)) >= 0;) fn(share, t);
    }
  });
}

// fn(t) for t in [0, tasks), split across threads when `parallel`: each
// thread owns an equal contiguous share, as with parallel_for's static
// schedule, and walks it in order, then helps with the others' from their
// far ends.
template <class Fn>
inline void parallel_shares(int64_t tasks, bool parallel, const Fn& fn) {
  if (!worth_threads(parallel) || tasks < 2) {
    for (int64_t t = 0; t < tasks; ++t) fn(t);
    return;
  }
  constexpr int64_t kMaxShares = 64;
  const int64_t team = std::min<int64_t>(omp_get_max_threads(), kMaxShares);
  auto first = [&](int64_t share) { return tasks * share / team; };
  std::array<ShareQueue, kMaxShares> queues;
  for (int64_t i = 0; i < team; ++i) queues[size_t(i)].reset(first(i + 1) - first(i));
  drain_shares(queues.data(), team, [&](int64_t share, int64_t t) { fn(first(share) + t); });
}

// fn(begin, end) over [0, n) in contiguous chunks (a few per thread), split
// across threads when `parallel`.
template <class Fn>
inline void parallel_ranges(int64_t n, bool parallel, const Fn& fn) {
  if (!worth_threads(parallel) || n < 2) {
    if (n > 0) fn(int64_t(0), n);
    return;
  }
  const int64_t chunks = std::min<int64_t>(n, int64_t(omp_get_max_threads()) * 4);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) fn(n * c / chunks, n * (c + 1) / chunks);
}

}  // namespace kiln
