#include "runtime/algorithms/algorithms.h"
#include "runtime/algorithms/ring_chunks.h"

namespace dtsim {

// Dissemination barrier: in round k rank r signals r + 2^k and waits for r - 2^k; after
// ceil(log2 N) rounds every rank has heard, transitively, from every other.
void barrier_dissemination(Exchange& ex) {
  const int n = ex.size();
  const int r = ex.rank();
  for (int k = 0, d = 1; d < n; ++k, d <<= 1) {
    ex.send(mod(r + d, n), k, nullptr, 0);
    ex.recv_copy(mod(r - d, n), k, nullptr, 0);
  }
}

}  // namespace dtsim
