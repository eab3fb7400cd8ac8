// A hook for counting heap allocations. Counting needs malloc interposition,
// which only a program can do (src/heap_counter, linked into `kiln` and the
// tests); it registers its counter here, so the library can attribute
// allocations to plan steps without depending on it.
#pragma once

#include <cstdint>

namespace kiln {

// Allocations made by any thread since the program started.
using HeapAllocationCount = int64_t (*)();

void set_heap_allocation_count(HeapAllocationCount count);
// Null when the program has no counter (or runs under AddressSanitizer).
HeapAllocationCount heap_allocation_count();

}  // namespace kiln
