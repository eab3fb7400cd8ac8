#include "runtime/caching_allocator.h"

#include <cstdlib>

namespace kiln {

namespace {
// Round like PyTorch's CPU caching: 512-byte granularity keeps reuse likely
// without wasting much.
size_t round_block(size_t bytes) { return bytes == 0 ? 512 : (bytes + 511) / 512 * 512; }
}  // namespace

std::shared_ptr<CachingAllocator> CachingAllocator::create() {
  return std::shared_ptr<CachingAllocator>(new CachingAllocator());
}

CachingAllocator::~CachingAllocator() {
  for (auto& [p, size] : block_size_) std::free(p);
}

void* CachingAllocator::allocate_bytes(size_t bytes) {
  size_t size = round_block(bytes);
  if (size > physical_memory_bytes()) return nullptr;
  ++stats_.allocations;
  // Reuse the smallest cached block that fits, unless it would waste over half.
  auto it = free_.lower_bound(size);
  void* p = nullptr;
  if (it != free_.end() && it->first <= 2 * size) {
    p = it->second;
    size = it->first;
    stats_.cached_bytes -= size;
    free_.erase(it);
  } else {
    p = std::aligned_alloc(64, size);
    if (p == nullptr) {
      empty_cache();  // give memory back and try once more
      p = std::aligned_alloc(64, size);
      if (p == nullptr) return nullptr;
    }
    block_size_[p] = size;
    ++stats_.system_allocations;
  }
  stats_.live_bytes += size;
  stats_.peak_live_bytes = std::max(stats_.peak_live_bytes, stats_.live_bytes);
  return p;
}

void CachingAllocator::release(void* p) {
  size_t size = block_size_.at(p);
  stats_.live_bytes -= size;
  stats_.cached_bytes += size;
  free_.emplace(size, p);
}

void CachingAllocator::empty_cache() {
  for (auto& [size, p] : free_) {
    block_size_.erase(p);
    std::free(p);
  }
  free_.clear();
  stats_.cached_bytes = 0;
}

Result<Tensor> CachingAllocator::allocate(DType dtype, Shape shape) {
  KILN_ASSIGN_OR_RETURN(int64_t n, shape_numel_checked(shape));
  size_t bytes = size_t(n) * dtype_size(dtype);
  void* p = allocate_bytes(bytes);
  if (p == nullptr)
    return resource_exhausted("cannot allocate {} bytes for a tensor of shape {}", bytes,
                              shape_to_string(shape));
  // The block returns to this allocator when the last Tensor copy is dropped.
  std::shared_ptr<const void> owner(p, [self = shared_from_this()](const void* q) {
    self->release(const_cast<void*>(q));
  });
  return Tensor(dtype, std::move(shape), p, std::move(owner));
}

}  // namespace kiln
