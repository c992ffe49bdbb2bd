// Binomial-tree reduce: the mirror of broadcast_tree. Rank v (root renumbered to 0) adds
// in the partial sums of v + 2^j for each j below its lowest set bit k, then sends its
// partial to v - 2^k. Non-root ranks reduce into a temporary, so their buffers are left
// as they were (torch semantics: only dst gets the result).
#include <cstring>

#include "runtime/algorithms/algorithms.h"
#include "runtime/algorithms/ring_chunks.h"

namespace dtsim {

void reduce_tree(Exchange& ex, void* data, size_t count, int root, const Reducer& red) {
  const int n = ex.size();
  const int vr = mod(ex.rank() - root, n);
  void* acc = data;
  if (vr != 0) {
    acc = ex.scratch(count * ex.esize());
    if (count) std::memcpy(acc, data, count * ex.esize());
  }
  for (int mask = 1, step = 0; mask < n; mask <<= 1, ++step) {
    if (vr & mask) {
      ex.send(mod(vr - mask + root, n), step, acc, count);
      break;
    }
    if (vr + mask < n) {
      ex.recv_reduce(mod(vr + mask + root, n), step, acc, count, red.reduce);
      ex.snapshot(acc, count);  // non-root ranks: the partial sum they pass on
    }
  }
}

// Ordered (deterministic) reduce: every rank sends to the root, which sums in rank order.
void reduce_ordered(Exchange& ex, void* data, size_t count, int root, const Reducer& red) {
  const int n = ex.size();
  const int r = ex.rank();
  if (r != root) {
    ex.send(root, 0, data, count);
    return;
  }
  std::byte* acc = ex.scratch(count * ex.esize());
  const size_t bytes = count * ex.esize();
  for (int i = 0; i < n; ++i) {
    Message m;
    const void* part = data;
    if (i != r) {
      m = ex.recv(i, 0, count);
      part = m.data;
    }
    if (i == 0) {
      if (bytes) std::memcpy(acc, part, bytes);
    } else {
      red.reduce(acc, part, count);
    }
    if (i != r) {
      ex.release(i, m);
      ex.snapshot(acc, count);
    }
  }
  if (bytes) std::memcpy(data, acc, bytes);
}

}  // namespace dtsim
