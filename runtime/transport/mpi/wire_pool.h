// A free list of wire buffers bucketed by power-of-two capacity, owned by one thread
// (a rank thread for its sends, the progress thread for its receives). Once warm, take()
// and put() allocate nothing.
//
// Thread safety: none; one owner thread.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <vector>

#include "runtime/transport/mpi/wire.h"

namespace dtsim::mpi {

class WirePool {
 public:
  WirePool() = default;
  WirePool(const WirePool&) = delete;
  WirePool& operator=(const WirePool&) = delete;
  ~WirePool() {
    for (auto& bucket : buckets_) {
      for (WireBuf b : bucket) free_wire(b);
    }
  }

  // A buffer with room for a header and `payload_bytes`.
  WireBuf take(size_t payload_bytes) {
    const size_t want = kHeaderBytes + payload_bytes;
    for (size_t i = bucket_of(want); i < kBuckets; ++i) {
      if (!buckets_[i].empty()) {
        WireBuf b = buckets_[i].back();
        buckets_[i].pop_back();
        return b;
      }
    }
    return allocate_wire(payload_bytes);
  }

  void put(WireBuf b) {
    std::vector<WireBuf>& bucket = buckets_[std::min(bucket_of(b.capacity), kBuckets - 1)];
    if (bucket.size() >= kKeepPerBucket) {
      free_wire(b);
      return;
    }
    if (bucket.capacity() == 0) bucket.reserve(kKeepPerBucket);
    bucket.push_back(b);
  }

 private:
  static constexpr size_t kBuckets = 48;
  static constexpr size_t kKeepPerBucket = 64;
  // Capacities are powers of two (allocate_wire): bucket i holds capacity 2^i.
  static size_t bucket_of(size_t bytes) { return std::bit_width(bytes - 1); }

  std::array<std::vector<WireBuf>, kBuckets> buckets_;
};

}  // namespace dtsim::mpi
