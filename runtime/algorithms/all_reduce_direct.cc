// Direct all-reduce: every rank sends its whole buffer to every other rank in one step and
// sums the N buffers itself in rank order 0..N-1. (N - 1) x the data per rank, but one
// step, and bitwise equal to a sequential sum on every rank. Large buffers are lent, not
// copied (`data` is not written until every peer has released it): N ranks keep N x M
// bytes readable instead of N (N - 1) x M in flight.
#include <cstring>

#include "runtime/algorithms/algorithms.h"

namespace dtsim {

void all_reduce_direct(Exchange& ex, void* data, size_t count, const Reducer& red) {
  const int n = ex.size();
  const int r = ex.rank();
  for (int p = 0; p < n; ++p) {
    if (p != r) ex.send_or_lend(p, 0, data, count);
  }
  std::byte* acc = ex.scratch(count * ex.esize());
  for (int i = 0; i < n; ++i) {
    if (i == r) {
      if (i == 0) {
        std::memcpy(acc, data, count * ex.esize());
      } else {
        red.reduce(acc, data, count);
      }
      continue;
    }
    Message m = ex.recv(i, 0, count);
    if (i == 0) {
      std::memcpy(acc, m.data, m.size);
    } else {
      red.reduce(acc, m.data, count);
    }
    ex.release(i, m);
    ex.snapshot(acc, count);
  }
  ex.settle();
  std::memcpy(data, acc, count * ex.esize());
}

}  // namespace dtsim
