// Traffic accounting: what each rank sent and received, per collective kind and per
// (communicator, peer). Written only by the rank's own thread, read after World::run
// returns (no atomics needed). Per-peer slots are allocated when a communicator is made,
// so counting a message never allocates.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/types.h"

namespace dtsim {

inline constexpr int kAlgoSlots = 16;  // room for every Algo value

struct OpCounters {
  uint64_t calls = 0;
  uint64_t steps = 0;  // communication steps (ring all_reduce: 2(N-1))
  uint64_t msgs_sent = 0;
  uint64_t bytes_sent = 0;
  uint64_t msgs_recv = 0;
  uint64_t bytes_recv = 0;
  uint64_t nanos = 0;  // wall time inside the calls (collectives only; 0 for send/recv)
  // Calls per algorithm (indexed by Algo) they ran, and of those the ones kAuto picked.
  std::array<uint32_t, kAlgoSlots> algo_calls{};
  std::array<uint32_t, kAlgoSlots> auto_calls{};

  // Bit 1 << Algo for each algorithm these calls ran (that kAuto picked).
  uint32_t algos() const { return mask(algo_calls); }
  uint32_t auto_algos() const { return mask(auto_calls); }
  static uint32_t mask(const std::array<uint32_t, kAlgoSlots>& calls) {
    uint32_t m = 0;
    for (int a = 0; a < kAlgoSlots; ++a) m |= calls[a] ? 1u << a : 0u;
    return m;
  }

  OpCounters& operator+=(const OpCounters& o) {
    calls += o.calls;
    steps += o.steps;
    msgs_sent += o.msgs_sent;
    bytes_sent += o.bytes_sent;
    msgs_recv += o.msgs_recv;
    bytes_recv += o.bytes_recv;
    nanos += o.nanos;
    for (int a = 0; a < kAlgoSlots; ++a) {
      algo_calls[a] += o.algo_calls[a];
      auto_calls[a] += o.auto_calls[a];
    }
    return *this;
  }
};

// What this rank exchanged with one member of one communicator (collectives and p2p).
struct PeerTraffic {
  uint64_t msgs_sent = 0;
  uint64_t bytes_sent = 0;
  uint64_t msgs_recv = 0;
  uint64_t bytes_recv = 0;
};

// One communicator this rank belonged to: its name ("world", "dp[0,2]", "group[1,3]"), its
// members (global ranks, in communicator order) and the traffic with each, indexed like
// `ranks` (peers[i] is the traffic with global rank ranks[i]).
struct GroupTraffic {
  std::string name;
  std::vector<int> ranks;
  std::vector<PeerTraffic> peers;
};

struct RankCounters {
  std::array<OpCounters, kNumOpKinds> by_op{};
  std::vector<GroupTraffic> groups;  // one per communicator made in the run, in order

  const OpCounters& operator[](OpKind k) const { return by_op[static_cast<int>(k)]; }
  OpCounters& operator[](OpKind k) { return by_op[static_cast<int>(k)]; }
  OpCounters total() const {
    OpCounters t;
    for (const auto& c : by_op) t += c;
    return t;
  }
};

}  // namespace dtsim
