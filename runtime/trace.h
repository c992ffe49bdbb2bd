// The lockstep trace: with WorldOptions::trace on, every send of every collective step is
// recorded (who sent which chunk to whom), and every rank's buffer after each step. This
// is what `dtsim walk` prints as the lesson's "walk the shapes" table. Off by default.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/types.h"

namespace dtsim {

struct TraceSend {
  uint64_t seq;  // collective sequence number on its communicator
  OpKind op;
  int phase;  // composite algorithms (reduce-scatter, then all-gather) have several
  int step;   // step within the phase, from 0
  int src;    // communicator-local ranks
  int dst;
  int chunk;     // chunk index the algorithm sent (-1 when it sent a whole buffer)
  size_t count;  // elements
};

struct TraceSnapshot {
  uint64_t seq;
  OpKind op;
  int phase;
  int step;  // the buffer after this step
  DType dtype;
  std::vector<std::byte> bytes;
};

struct RankTrace {
  std::vector<TraceSend> sends;
  std::vector<TraceSnapshot> snapshots;
  void clear() {
    sends.clear();
    snapshots.clear();
  }
};

}  // namespace dtsim
