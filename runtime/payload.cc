#include "runtime/payload.h"

#include <sys/mman.h>

#include <new>

namespace dtsim {
namespace {

// From 4 MiB up a buffer sits on 2 MiB boundaries and asks for transparent huge pages: a
// 512th of the page faults of its first touch (the cost of large sends on a fresh pool).
constexpr size_t kHugePage = size_t{2} << 20;
std::align_val_t alignment(size_t cap) {
  return std::align_val_t{cap >= 2 * kHugePage ? kHugePage : 64};
}

}  // namespace

PayloadBuffer allocate_payload(size_t size) {
  const size_t cap = payload_capacity(size);
  auto* p = static_cast<std::byte*>(::operator new(cap, alignment(cap)));
  if (cap >= 2 * kHugePage) madvise(p, cap, MADV_HUGEPAGE);  // advice: ordinary pages without
  return {p, cap};
}

void free_payload(PayloadBuffer b) {
  if (b.data) ::operator delete(b.data, alignment(b.capacity));
}

}  // namespace dtsim
