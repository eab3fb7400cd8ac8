#include "heap_counter/heap_counter.h"

#include "core/heap_probe.h"

#include <atomic>
#include <cstddef>

// glibc's own entry points, which our definitions forward to.
extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
void __libc_free(void*);
}

namespace {
std::atomic<int64_t> g_allocations{0};
inline void note_allocation() { g_allocations.fetch_add(1, std::memory_order_relaxed); }
}  // namespace

#if defined(__SANITIZE_ADDRESS__)
#define KILN_HEAP_COUNTER 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KILN_HEAP_COUNTER 0
#endif
#endif
#ifndef KILN_HEAP_COUNTER
#define KILN_HEAP_COUNTER 1
#endif

#if KILN_HEAP_COUNTER
extern "C" {
void* malloc(size_t n) {
  note_allocation();
  return __libc_malloc(n);
}
void* calloc(size_t count, size_t n) {
  note_allocation();
  return __libc_calloc(count, n);
}
void* realloc(void* p, size_t n) {
  note_allocation();
  return __libc_realloc(p, n);
}
void free(void* p) { __libc_free(p); }
void* memalign(size_t alignment, size_t n) {
  note_allocation();
  return __libc_memalign(alignment, n);
}
void* aligned_alloc(size_t alignment, size_t n) {
  note_allocation();
  return __libc_memalign(alignment, n);
}
int posix_memalign(void** out, size_t alignment, size_t n) {
  if (alignment % sizeof(void*) != 0 || (alignment & (alignment - 1)) != 0) return 22;  // EINVAL
  note_allocation();
  void* p = __libc_memalign(alignment, n);
  if (!p && n) return 12;  // ENOMEM
  *out = p;
  return 0;
}
}
#endif

namespace kiln {

namespace {
int64_t total_allocations() { return g_allocations.load(std::memory_order_relaxed); }
// Lets the library attribute allocations to plan steps (core/heap_probe.h).
[[maybe_unused]] const bool g_registered = [] {
  if (KILN_HEAP_COUNTER) set_heap_allocation_count(&total_allocations);
  return true;
}();
}  // namespace

HeapCounter::HeapCounter() : start_(g_allocations.load()) {}
HeapCounter::~HeapCounter() = default;

bool HeapCounter::available() { return KILN_HEAP_COUNTER != 0; }
int64_t HeapCounter::allocations() const { return g_allocations.load() - start_; }

}  // namespace kiln
