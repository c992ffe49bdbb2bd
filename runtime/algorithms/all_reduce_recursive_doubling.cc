// Recursive-doubling all-reduce: ceil(log2 N) exchange steps of the whole buffer with the
// partner whose rank differs in one bit; latency-optimal for small messages. When N is not
// a power of two p, the first 2(N - p) ranks pair up first: even ones hand their data to
// their odd neighbour, sit out, and get the result back at the end. Partners combine
// a op b and b op a, which are bitwise equal, so every rank ends with the same bits.
#include "runtime/algorithms/algorithms.h"

namespace dtsim {

void all_reduce_recursive_doubling(Exchange& ex, void* data, size_t count, const Reducer& red) {
  const int n = ex.size();
  const int r = ex.rank();
  int p = 1;
  int levels = 0;
  while (p * 2 <= n) {
    p *= 2;
    ++levels;
  }
  const int rem = n - p;
  // Step 0 is the pairing step, which only exists when N is not a power of two; without
  // it the exchanges start at step 0, so the step counter reports log2 N, not log2 N + 1.
  const int first = rem > 0 ? 1 : 0;
  int vr;  // rank among the p that take part in the exchanges, -1 if sitting out
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      ex.send(r + 1, 0, data, count);
      vr = -1;
    } else {
      ex.recv_reduce(r - 1, 0, data, count, red.reduce);
      ex.snapshot(data, count);
      vr = r / 2;
    }
  } else {
    vr = r - rem;
  }
  if (vr >= 0) {
    for (int mask = 1, step = first; mask < p; mask <<= 1, ++step) {
      const int pv = vr ^ mask;
      const int peer = pv < rem ? pv * 2 + 1 : pv + rem;
      ex.send(peer, step, data, count);
      ex.recv_reduce(peer, step, data, count, red.reduce);
      ex.snapshot(data, count);
    }
  }
  if (r < 2 * rem) {
    if (r % 2 == 1) {
      ex.send(r - 1, levels + 1, data, count);
    } else {
      ex.recv_copy(r + 1, levels + 1, data, count);
      ex.snapshot(data, count);
    }
  }
}

}  // namespace dtsim
