#include "core/heap_probe.h"

#include <atomic>

namespace kiln {

namespace {
std::atomic<HeapAllocationCount> g_count{nullptr};
}

void set_heap_allocation_count(HeapAllocationCount count) { g_count.store(count); }
HeapAllocationCount heap_allocation_count() { return g_count.load(std::memory_order_relaxed); }

}  // namespace kiln
