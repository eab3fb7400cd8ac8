// A caching allocator for the eager executor, as PyTorch's eager mode has:
// freed blocks go to a free list and are reused by later allocations of a
// similar size, so steady-state eager runs make few system allocations.
//
//   auto alloc = CachingAllocator::create();
//   KILN_ASSIGN_OR_RETURN(Tensor t, alloc->allocate(DType::kF32, {64, 64}));
//   // t's block returns to the cache when the last copy of t is dropped.
#pragma once

#include <map>
#include <memory>

#include "core/tensor.h"

namespace kiln {

struct AllocatorStats {
  size_t live_bytes = 0;      // bytes in tensors handed out and not yet freed
  size_t peak_live_bytes = 0; // most live_bytes at any moment since reset_peak()
  size_t cached_bytes = 0;    // bytes held in the free lists
  size_t system_allocations = 0;
  size_t allocations = 0;
};

class CachingAllocator : public std::enable_shared_from_this<CachingAllocator> {
 public:
  static std::shared_ptr<CachingAllocator> create();
  ~CachingAllocator();

  // Uninitialized memory, 64-byte aligned. Fails on sizes past the machine's memory.
  Result<Tensor> allocate(DType dtype, Shape shape);
  // Raw block (scratch); returned to the cache by release().
  void* allocate_bytes(size_t bytes);
  void release(void* p);

  const AllocatorStats& stats() const { return stats_; }
  void reset_peak() { stats_.peak_live_bytes = stats_.live_bytes; }
  void empty_cache();

 private:
  CachingAllocator() = default;
  std::multimap<size_t, void*> free_;   // block size -> block
  std::map<void*, size_t> block_size_;  // every block we own
  AllocatorStats stats_;
};

}  // namespace kiln
