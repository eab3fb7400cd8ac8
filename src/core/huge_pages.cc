#include "core/huge_pages.h"

#include <sys/mman.h>

#include <unistd.h>

#include <cstdint>
#include <cstdlib>

namespace kiln {

namespace {
constexpr size_t kHugePage = size_t(2) << 20;
// Below this, aligning to a huge page would waste more than it saves.
constexpr size_t kHugeFrom = size_t(4) << 20;
}  // namespace

void* allocate_huge(size_t bytes) {
  bytes = (bytes + 63) / 64 * 64;
  if (bytes < kHugeFrom) return std::aligned_alloc(64, bytes == 0 ? 64 : bytes);
  void* p = nullptr;
  if (posix_memalign(&p, kHugePage, bytes) != 0) return nullptr;
  // Only whole huge pages: advising the last, part-used one would make it
  // resident whole. A refusal (THP off) just leaves 4 KB pages.
  madvise(p, bytes / kHugePage * kHugePage, MADV_HUGEPAGE);
  return p;
}

void release_pages(void* p, size_t bytes) {
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes) / page * page;
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

}  // namespace kiln
