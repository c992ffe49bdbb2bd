// The seams through which a test or stress binary plants a bug in one World, so that the
// stress tester's power to find a race is measured instead of assumed. The release runtime
// holds only these seams; the bugs themselves (runtime/mutants/, library dtsim_mutants) are
// linked into test and stress binaries only, never into dtsim.
//
// Thread safety: a PlantedBug is immutable and outlives every World that uses it.
#pragma once

#include <memory>
#include <span>

#include "runtime/algorithms/registry.h"

namespace dtsim {

class Transport;
class ThreadShared;

struct PlantedBug {
  const char* name;  // what `dtsim_with_mutants stress --mutant` and schedule files say
  // Rows that replace the registry's rows of the same (collective, algorithm) in the World.
  std::span<const AlgoRow> rows;
  // Makes rank `rank`'s in-process transport in place of the ThreadTransport, or nullptr.
  std::unique_ptr<Transport> (*thread_transport)(ThreadShared* state, int rank) = nullptr;
};

// `row`, or the row `bug` puts in its place (bug may be null).
inline const AlgoRow& planted_row(const PlantedBug* bug, const AlgoRow& row) {
  if (bug == nullptr) return row;
  for (const AlgoRow& r : bug->rows) {
    if (r.op == row.op && r.algo == row.algo) return r;
  }
  return row;
}

}  // namespace dtsim
