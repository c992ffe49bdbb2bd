// Ring all-reduce, with the lesson's exact schedule: N - 1 reduce-scatter steps, in which
// rank r sends chunk (r - t) mod N to rank r + 1, which accumulates it, then N - 1
// all-gather steps, in which rank r sends chunk (r + 1 - t) mod N, which the receiver
// overwrites. Each rank sends 2(N - 1)/N of the data, whatever N is.
//
// Large chunks are lent, not copied (Exchange::send_or_lend): the receiver reduces or
// copies straight from the sender's buffer. A step never writes the chunk it lends, and
// the chunk lent in reduce-scatter step t is overwritten in all-gather step t, so one
// settle() between the phases (and one at the end) keeps every lent chunk unchanged
// while it is read: the snapshot rule holds with one copy instead of two.
#include "runtime/algorithms/algorithms.h"
#include "runtime/algorithms/ring_chunks.h"

namespace dtsim {

void all_reduce_ring(Exchange& ex, void* data, size_t count, const Reducer& red) {
  const int n = ex.size();
  const int r = ex.rank();
  const int right = mod(r + 1, n);
  const int left = mod(r - 1, n);
  const Chunks ch{count, static_cast<size_t>(n)};
  for (int t = 0; t < n - 1; ++t) {
    const int s = mod(r - t, n);
    ex.send_or_lend(right, t, ex.at(data, ch.offset(s)), ch.size(s), s);
    const int c = mod(r - 1 - t, n);
    ex.recv_reduce(left, t, ex.at(data, ch.offset(c)), ch.size(c), red.reduce);
    ex.snapshot(data, count);
  }
  // Rank r now holds the full reduction of chunk (r + 1) mod N.
  ex.settle();
  for (int t = 0; t < n - 1; ++t) {
    const int step = n - 1 + t;
    const int s = mod(r + 1 - t, n);
    ex.send_or_lend(right, step, ex.at(data, ch.offset(s)), ch.size(s), s);
    const int c = mod(r - t, n);
    ex.recv_copy(left, step, ex.at(data, ch.offset(c)), ch.size(c));
    ex.snapshot(data, count);
  }
  ex.settle();
}

}  // namespace dtsim
