// Pooled payload buffers: the storage the transports copy message bytes into (the thread
// transport's mailboxes, the MPI transport's wire buffers). Allocation only; each transport
// keeps its own pools and accounting.
//
// Thread safety: allocate_payload and free_payload are safe from any thread.
#pragma once

#include <cstddef>

namespace dtsim {

struct PayloadBuffer {
  std::byte* data = nullptr;
  size_t capacity = 0;
};

// The capacity allocate_payload() gives `size` bytes: a power of two, at least 64.
inline size_t payload_capacity(size_t size) {
  size_t cap = 64;
  while (cap < size) cap *= 2;
  return cap;
}
// A payload buffer of payload_capacity(size) bytes, 64-byte aligned (no accounting: the
// thread transport's ThreadShared::try_allocate_payload counts it against the budget).
PayloadBuffer allocate_payload(size_t size);
void free_payload(PayloadBuffer b);

}  // namespace dtsim
