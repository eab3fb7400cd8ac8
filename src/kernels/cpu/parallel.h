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
//   parallel_tasks(points, big, [&](int64_t p) { ... });  // handed out as threads free up
//   parallel_ranges(n, big, [&](int64_t begin, int64_t end) { ... });
//   parallel_region(big, [&] { ... omp_get_thread_num() ... });
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace kiln {

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

// fn(t) for t in [0, tasks), split across threads when `parallel`.
template <class Fn>
inline void parallel_for(int64_t tasks, bool parallel, const Fn& fn) {
  if (!worth_threads(parallel) || tasks < 2) {
    for (int64_t t = 0; t < tasks; ++t) fn(t);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < tasks; ++t) fn(t);
}

// The same, each thread taking the next task as it frees up: for equal,
// independent tasks of tens of microseconds or more, where a thread the
// machine delays should not be left a fixed share.
template <class Fn>
inline void parallel_tasks(int64_t tasks, bool parallel, const Fn& fn) {
  if (!worth_threads(parallel) || tasks < 2) {
    for (int64_t t = 0; t < tasks; ++t) fn(t);
    return;
  }
#pragma omp parallel for schedule(dynamic)
  for (int64_t t = 0; t < tasks; ++t) fn(t);
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
