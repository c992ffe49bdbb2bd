// Memory before work: the peak a run is expected to need, per rank, from its placements
// (each rank's model-parallel layout, what its ZeRO stage keeps of it, the optimizer's
// state) plus a bound on its activations, against the memory this machine has available.
// validate() refuses a run whose process cannot hold its ranks before anything starts.
//
// Thread safety: pure functions (available_memory reads /proc).
#pragma once

#include <cstdint>
#include <vector>

#include "train/config.h"

namespace dtsim::train {

struct MemoryPlan {
  std::vector<int64_t> rank_bytes;  // expected peak of each rank
  int64_t process_bytes = 0;        // of the ranks one process holds (all of them as threads)
};

// The expected peak of every rank of `config` (a mesh strategy or a reference).
MemoryPlan plan_memory(const TrainConfig& config);

// Bytes this machine can still give (MemAvailable, capped by a cgroup limit); -1 if unknown.
int64_t available_memory();

// Throws UsageError naming the expected and the available memory when the process's ranks
// cannot fit in what is available.
void require_memory(const TrainConfig& config);

}  // namespace dtsim::train
