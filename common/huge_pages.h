// Large buffers on transparent huge pages: a block 2 MiB aligned and a whole number of 2 MiB
// pages long, advised MADV_HUGEPAGE (a hint: without THP the kernel gives ordinary pages), so
// that its first touch takes a 512th of the page faults and a pass over it few TLB entries.
// The one allocation behind model::LargePageAllocator, the runtime's large payload buffers
// and the stress client's buffers. Header-only; thread-safe (std::aligned_alloc).
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdlib>
#include <new>

namespace dtsim {

inline constexpr size_t kHugePage = size_t{2} << 20;

// `bytes` rounded up to whole huge pages.
inline size_t huge_page_bytes(size_t bytes) {
  return (bytes + kHugePage - 1) / kHugePage * kHugePage;
}

// A block of huge_page_bytes(bytes), 2 MiB aligned and advised; free it with std::free.
// Throws std::bad_alloc.
inline void* allocate_huge_pages(size_t bytes) {
  const size_t rounded = huge_page_bytes(bytes);
  void* p = std::aligned_alloc(kHugePage, rounded);
  if (p == nullptr) throw std::bad_alloc();
  madvise(p, rounded, MADV_HUGEPAGE);
  return p;
}

}  // namespace dtsim
