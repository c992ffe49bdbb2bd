// Traffic accounting: what each rank sent and received, per collective kind. Written only
// by the rank's own thread, read after World::run returns (no atomics needed).
#pragma once

#include <array>
#include <cstdint>

#include "runtime/types.h"

namespace dtsim {

struct OpCounters {
  uint64_t calls = 0;
  uint64_t steps = 0;  // communication steps (ring all_reduce: 2(N-1))
  uint64_t msgs_sent = 0;
  uint64_t bytes_sent = 0;
  uint64_t msgs_recv = 0;
  uint64_t bytes_recv = 0;
  uint32_t algos = 0;       // bit 1 << Algo for each algorithm these calls ran
  uint32_t auto_algos = 0;  // of those, the ones kAuto picked (the rest were asked for)

  OpCounters& operator+=(const OpCounters& o) {
    calls += o.calls;
    steps += o.steps;
    msgs_sent += o.msgs_sent;
    bytes_sent += o.bytes_sent;
    msgs_recv += o.msgs_recv;
    bytes_recv += o.bytes_recv;
    algos |= o.algos;
    auto_algos |= o.auto_algos;
    return *this;
  }
};

struct RankCounters {
  std::array<OpCounters, kNumOpKinds> by_op{};

  const OpCounters& operator[](OpKind k) const { return by_op[static_cast<int>(k)]; }
  OpCounters& operator[](OpKind k) { return by_op[static_cast<int>(k)]; }
  OpCounters total() const {
    OpCounters t;
    for (const auto& c : by_op) t += c;
    return t;
  }
};

}  // namespace dtsim
