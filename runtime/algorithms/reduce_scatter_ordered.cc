// Ordered (deterministic) reduce-scatter: every rank sends chunk j of its input to rank j
// in one step; rank j sums the N contributions in rank order 0..N-1. Same traffic as the
// ring, N - 1 messages per rank in one step, and bitwise reproducible.
#include <cstring>

#include "runtime/algorithms/algorithms.h"
#include "runtime/algorithms/ring_chunks.h"

namespace dtsim {

void reduce_scatter_ordered(Exchange& ex, const void* in, size_t count, void* out,
                            const Reducer& red) {
  const int n = ex.size();
  const int r = ex.rank();
  const Chunks ch{count, static_cast<size_t>(n)};
  for (int j = 0; j < n; ++j) {
    if (j != r) ex.send(j, 0, ex.at(in, ch.offset(j)), ch.size(j), j);
  }
  const size_t mine = ch.size(r);
  const size_t bytes = mine * ex.esize();
  std::byte* acc = ex.scratch(bytes);  // `out` may alias our own input chunk
  for (int i = 0; i < n; ++i) {
    Message m;
    const void* part = ex.at(in, ch.offset(r));
    if (i != r) {
      m = ex.recv(i, 0, mine);
      part = m.data;
    }
    if (i == 0) {
      if (bytes) std::memcpy(acc, part, bytes);
    } else {
      red.reduce(acc, part, mine);
    }
    if (i != r) {
      ex.release(i, m);
      ex.snapshot(acc, mine);
    }
  }
  if (bytes) std::memcpy(out, acc, bytes);
}

}  // namespace dtsim
