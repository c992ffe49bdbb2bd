#include "runtime/payload.h"

#include <new>

#include "common/huge_pages.h"

namespace dtsim {
namespace {

// From 4 MiB up a buffer is a huge-page block: a 512th of the page faults of its first touch
// (the cost of large sends on a fresh pool). Capacities are powers of two, so whole pages.
bool huge(size_t cap) { return cap >= 2 * kHugePage; }

}  // namespace

PayloadBuffer allocate_payload(size_t size) {
  const size_t cap = payload_capacity(size);
  void* p = huge(cap) ? allocate_huge_pages(cap) : ::operator new (cap, std::align_val_t{64});
  return {static_cast<std::byte*>(p), cap};
}

void free_payload(PayloadBuffer b) {
  if (b.data == nullptr) return;
  if (huge(b.capacity)) return std::free(b.data);
  ::operator delete (b.data, std::align_val_t{64});
}

}  // namespace dtsim
