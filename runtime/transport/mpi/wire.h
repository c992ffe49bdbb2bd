// What one MPI message carries: a fixed header (who, which collective, which run) and
// the payload right behind it, in one buffer, so one MPI_Isend moves both.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/transport/transport.h"

namespace dtsim::mpi {

enum class WireKind : uint32_t {
  kData,   // a rank's message to a rank in another process
  kAbort,  // payload: the failed rank's error (src = that rank)
  kDone,   // this process's rank threads all left the run (src = first rank of it)
  kAlive,  // a beat: this process made progress lately (MpiProcess; any epoch, header only)
  kBegin,  // this process began the run (src = first rank of it)
};

struct WireHeader {
  uint64_t epoch = 0;  // (world number << 32) | run number: stale messages are dropped
  WireKind kind = WireKind::kData;
  int32_t src = -1;  // global ranks
  int32_t dst = -1;
  uint32_t pad = 0;
  MessageKey key;
  Signature sig;  // the sender's collective fingerprint: mismatches across processes
  uint64_t size = 0;
};

// The payload starts here in every wire buffer (cache-line aligned).
inline constexpr size_t kHeaderBytes = (sizeof(WireHeader) + 63) / 64 * 64;

// A header followed by its payload; `capacity` counts both.
struct WireBuf {
  std::byte* data = nullptr;
  size_t capacity = 0;
  WireHeader& header() const { return *reinterpret_cast<WireHeader*>(data); }
  std::byte* payload() const { return data + kHeaderBytes; }
  size_t wire_bytes() const { return kHeaderBytes + header().size; }
};

WireBuf allocate_wire(size_t payload_bytes);
void free_wire(WireBuf b);

}  // namespace dtsim::mpi
