// Counts heap allocations for real, by interposing malloc and friends in the
// program that links this library (the `kiln` binary, the tests). Used to
// check that a compiled plan's replay allocates nothing.
//
//   HeapCounter counter;               // counting from here
//   plan.run();
//   int64_t n = counter.allocations(); // every malloc/calloc/realloc/
//                                      // posix_memalign/aligned_alloc, any thread
//
// Under AddressSanitizer the sanitizer owns malloc; the counter is then
// unavailable (available() is false) rather than wrong.
#pragma once

#include <cstdint>

namespace kiln {

class HeapCounter {
 public:
  HeapCounter();
  ~HeapCounter();
  HeapCounter(const HeapCounter&) = delete;
  HeapCounter& operator=(const HeapCounter&) = delete;

  static bool available();
  // Allocations made (by any thread) since this counter was created.
  int64_t allocations() const;

 private:
  int64_t start_;
};

}  // namespace kiln
