// Pairwise-exchange all-to-all: in step s (1..N-1) rank r sends its block for rank r + s
// and receives the block from rank r - s, so every step is a permutation and no rank is
// the target of two senders at once.
#include <cstring>

#include "runtime/algorithms/algorithms.h"
#include "runtime/algorithms/ring_chunks.h"

namespace dtsim {
namespace {

size_t prefix(const size_t* counts, int j) {
  size_t s = 0;
  for (int k = 0; k < j; ++k) s += counts[k];
  return s;
}

}  // namespace

void all_to_all_pairwise(Exchange& ex, const void* in, const size_t* send_counts, void* out,
                         const size_t* recv_counts) {
  const int n = ex.size();
  const int r = ex.rank();
  if (send_counts[r]) {
    std::memcpy(ex.at(out, prefix(recv_counts, r)), ex.at(in, prefix(send_counts, r)),
                send_counts[r] * ex.esize());
  }
  for (int s = 1; s < n; ++s) {
    const int dst = mod(r + s, n);
    const int src = mod(r - s, n);
    ex.send(dst, s - 1, ex.at(in, prefix(send_counts, dst)), send_counts[dst], dst);
    ex.recv_copy(src, s - 1, ex.at(out, prefix(recv_counts, src)), recv_counts[src]);
    ex.snapshot(out, prefix(recv_counts, n));
  }
}

}  // namespace dtsim
