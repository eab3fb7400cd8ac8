// Large buffers on transparent huge pages, where the system grants them on
// request (Linux's default THP mode, "madvise"): a 2 MB page is one page
// fault and one TLB entry where 4 KB pages take 512 of each. A plan's own
// copies of its weights and its arena are allocated so; both are written
// whole as the plan is built and read on every replay.
#pragma once

#include <cstddef>

namespace kiln {

// `bytes` bytes, 64-byte aligned (2 MB aligned from 4 MB up, huge pages
// asked for on every whole 2 MB of them), to be freed with std::free;
// nullptr when none are left.
void* allocate_huge(size_t bytes);

// Gives the whole pages inside [p, p + bytes) of such a buffer back to the
// system (MADV_DONTNEED): its contents are lost, its address stays valid,
// and the next touch maps fresh zeroed pages.
void release_pages(void* p, size_t bytes);

}  // namespace kiln
