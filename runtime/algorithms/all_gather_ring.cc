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
  const bool off_by_one = ex.mutant() == Mutant::kSplitOffByOne;
  const Chunks ch{total, static_cast<size_t>(n), off_by_one};
  std::byte* mine = ex.at(out, ch.offset(r));
  // Mutant::kLendOverwrite: the own chunk is put in place only after it was lent.
  const size_t own = split_size(total, n, r);
  const bool late = ex.mutant() == Mutant::kLendOverwrite && ex.lends(own);
  if (mine != in && own && !late) std::memmove(mine, in, own * ex.esize());
  const int right = mod(r + 1, n);
  const int left = mod(r - 1, n);
  for (int t = 0; t < n - 1; ++t) {
    const int s = mod(r - t, n);
    ex.send_or_lend(right, t, ex.at(out, ch.offset(s)), ch.size(s), s);
    const int c = mod(r - 1 - t, n);
    ex.recv_copy(left, t, ex.at(out, ch.offset(c)), ch.size(c));
    if (late && t == 0 && mine != in) std::memmove(mine, in, own * ex.esize());
    ex.snapshot(out, total);
  }
  ex.settle();
}

}  // namespace dtsim
