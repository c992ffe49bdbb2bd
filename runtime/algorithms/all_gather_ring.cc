// Ring all-gather: rank r starts with chunk r; in step t it sends chunk (r - t) mod N to
// rank r + 1 and receives chunk (r - 1 - t) mod N from rank r - 1. N - 1 steps, each rank
// sends (N - 1)/N of the output. Large chunks are lent (Exchange::send_or_lend): the chunk
// lent in step t was written in step t - 1 and is not written again, so one settle() at
// the end suffices.
#include <cstring>

#include "runtime/algorithms/algorithms.h"
#include "runtime/algorithms/ring_chunks.h"

namespace dtsim {

void all_gather_ring(Exchange& ex, const void* in, void* out, size_t total) {
  const int n = ex.size();
  const int r = ex.rank();
  const Chunks ch{total, static_cast<size_t>(n)};
  std::byte* mine = ex.at(out, ch.offset(r));
  const size_t own = ch.size(r);
  if (mine != in && own) std::memmove(mine, in, own * ex.esize());
  const int right = mod(r + 1, n);
  const int left = mod(r - 1, n);
  for (int t = 0; t < n - 1; ++t) {
    const int s = mod(r - t, n);
    ex.send_or_lend(right, t, ex.at(out, ch.offset(s)), ch.size(s), s);
    const int c = mod(r - 1 - t, n);
    ex.recv_copy(left, t, ex.at(out, ch.offset(c)), ch.size(c));
    ex.snapshot(out, total);
  }
  ex.settle();
}

}  // namespace dtsim
