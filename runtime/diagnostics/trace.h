// The collective trace: with WorldOptions::trace on, every rank records, in its program
// order, each message it sends and receives in a collective and its buffer after each
// receive (when the algorithm snapshots it). causal_steps() turns those per-rank records
// into causal order, which is what `dtsim walk` prints. Off by default.
//
// Causal order needs no lockstep: a rank sends one message at a time (the one-port model
// under which a binomial tree takes ceil(log2 N) steps), and a send can happen no earlier
// than the step after the last message its rank received before it. So a send's step is
// max(1 + the step of its rank's previous send, 1 + the latest step its rank received
// before it), a receive's step is its send's, and a rank's buffer "after step k" is its
// last snapshot taken before it received anything of a later step.
//
// Thread safety: a RankTrace is written by its rank's thread during World::run and read
// after it returns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/types.h"

namespace dtsim {

enum class TraceKind : uint8_t { kSend, kRecv, kSnapshot };

struct TraceEvent {
  TraceKind kind;
  uint64_t seq;  // collective sequence number on its communicator
  OpKind op;
  int phase;  // composite algorithms (reduce, then broadcast) have several
  int tag;    // the algorithm's step tag within the phase (not time: see causal_steps)
  int src;    // communicator-local ranks; a snapshot has src == dst == the rank
  int dst;
  int chunk;     // chunk index the algorithm sent (-1 when it sent a whole buffer)
  size_t count;  // elements
  DType dtype;
  std::vector<std::byte> bytes;  // snapshots: the buffer
};

struct RankTrace {
  std::vector<TraceEvent> events;  // program order
  // The sends alone, in program order.
  std::vector<TraceEvent> sends() const;
  void clear() { events.clear(); }
};

// One causal step: sends that can happen at once, and every rank's buffer after them.
struct CausalStep {
  std::vector<TraceEvent> sends;         // ordered by source rank, then program order
  std::vector<const TraceEvent*> after;  // by rank: its latest snapshot (nullptr: none yet)
  std::vector<std::vector<int>> from;    // by rank: whom it received from in this step
};

// The causal steps of the collectives in `ranks` (one trace per rank of one communicator,
// as World::trace gives them). Throws Error if a receive has no matching send.
std::vector<CausalStep> causal_steps(const std::vector<const RankTrace*>& ranks);

}  // namespace dtsim
