// Binomial-tree broadcast: with ranks renumbered so the root is 0, rank v receives from
// v - 2^k in step k, where 2^k is v's lowest set bit, then sends to v + 2^j for every
// smaller j. ceil(log2 N) steps.
#include "runtime/algorithms/algorithms.h"
#include "runtime/algorithms/ring_chunks.h"

namespace dtsim {

void broadcast_tree(Exchange& ex, void* data, size_t count, int root) {
  const int n = ex.size();
  const int vr = mod(ex.rank() - root, n);
  int mask = 1;
  int step = 0;
  while (mask < n) {
    if (vr & mask) {
      ex.recv_copy(mod(vr - mask + root, n), step, data, count);
      ex.snapshot(data, count);
      break;
    }
    mask <<= 1;
    ++step;
  }
  for (mask >>= 1, --step; mask > 0; mask >>= 1, --step) {
    if (vr + mask < n) ex.send(mod(vr + mask + root, n), step, data, count);
  }
}

// Direct broadcast: the root sends to every other rank in one step.
void broadcast_direct(Exchange& ex, void* data, size_t count, int root) {
  if (ex.rank() == root) {
    for (int p = 0; p < ex.size(); ++p) {
      if (p != root) ex.send_or_lend(p, 0, data, count);  // one buffer, not N - 1 copies
    }
    ex.settle();
  } else {
    ex.recv_copy(root, 0, data, count);
    ex.snapshot(data, count);
  }
}

}  // namespace dtsim
