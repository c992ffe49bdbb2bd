#include "runtime/payload.h"

#include <new>

namespace dtsim {

PayloadBuffer allocate_payload(size_t size) {
  const size_t cap = payload_capacity(size);
  auto* p = static_cast<std::byte*>(::operator new (cap, std::align_val_t{64}));
  return {p, cap};
}

void free_payload(PayloadBuffer b) {
  if (b.data) ::operator delete (b.data, std::align_val_t{64});
}

}  // namespace dtsim
