// Ring reduce-scatter: in step t rank r sends the partial sum of chunk (r - 1 - t) mod N to
// rank r + 1, which adds its own input chunk and passes it on; after N - 1 steps rank r
// holds the full reduction of chunk r (the lesson's reduce_scatter, shifted by one so that
// rank r ends with chunk r). The partial is added in place in the received message, so
// no temporary of the full length is needed.
#include <cstring>

#include "runtime/algorithms/algorithms.h"
#include "runtime/algorithms/ring_chunks.h"

namespace dtsim {

void reduce_scatter_ring(Exchange& ex, const void* in, size_t count, void* out,
                         const Reducer& red) {
  const int n = ex.size();
  const int r = ex.rank();
  const Chunks ch{count, static_cast<size_t>(n)};
  if (n == 1) {
    if (count) std::memcpy(out, in, count * ex.esize());  // empty buffers may be null (UB)
    return;
  }
  const int right = mod(r + 1, n);
  const int left = mod(r - 1, n);
  const int first = mod(r - 1, n);
  ex.send(right, 0, ex.at(in, ch.offset(first)), ch.size(first), first);
  for (int t = 0; t < n - 1; ++t) {
    const int c = mod(r - 2 - t, n);
    Message m = ex.recv(left, t, ch.size(c));
    if (t < n - 2) {
      red.reduce(m.data, ex.at(in, ch.offset(c)), ch.size(c));
      ex.snapshot(m.data, ch.size(c));
      try {
        ex.send(right, t + 1, m.data, ch.size(c), c);
      } catch (...) {
        ex.release(left, m);  // hand the pooled buffer back even when the send fails
        throw;
      }
    } else {
      red.reduce3(out, m.data, ex.at(in, ch.offset(c)), ch.size(c));
      ex.snapshot(out, ch.size(c));
    }
    ex.release(left, m);
  }
}

}  // namespace dtsim
