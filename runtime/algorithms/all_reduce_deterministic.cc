// Deterministic all-reduce: an ordered reduce-scatter (every element summed in rank order
// 0..N-1 by the rank that owns its chunk) followed by a ring all-gather. The same
// 2(N - 1)/N traffic per rank as the ring, and bitwise equal to a sequential sum, run after
// run, whatever the thread timing: what bitwise DDP == gradient accumulation needs.
#include "runtime/algorithms/algorithms.h"
#include "runtime/algorithms/ring_chunks.h"

namespace dtsim {

void all_reduce_deterministic(Exchange& ex, void* data, size_t count, const Reducer& red) {
  const Chunks ch{count, static_cast<size_t>(ex.size())};
  const int r = ex.rank();
  // The owned chunk is reduced straight into its place in `data`: the ordered
  // reduce-scatter has already sent every chunk (snapshots) before it writes anything.
  reduce_scatter_ordered(ex, data, count, ex.at(data, ch.offset(r)), red);
  ex.begin_phase();
  all_gather_ring(ex, ex.at(data, ch.offset(r)), data, count);
}

}  // namespace dtsim
