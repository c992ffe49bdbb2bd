// Shared-memory all-reduce: every rank lends its whole buffer to every other, writable
// (Exchange::lend_shared). Rank r owns chunk r (tensor_split): it sums chunk r of the N
// buffers in rank order 0..N-1, a strip at a time in registers (Reducer::reduce_all), and
// stores each strip's sum straight into chunk r of all N buffers. Only rank r touches chunk r of
// any buffer, so no two ranks touch the same bytes; each rank's settle() waits until every peer has
// released (written) its buffer. Per rank N reads and N writes of S/N bytes, 2S in all against the
// ring's 5(N-1)/N S, and two synchronisations instead of 2(N-1) steps.
//
// Traffic counters: what crosses rank boundaries, chunk r read from and written back to each
// peer: 2(N-1)/N S per rank, the ring's volume (the lends themselves move nothing).
//
// Bitwise the sequential sum, like `deterministic`, which runs instead where the ranks do
// not share memory (MPI processes) or the buffer is below WorldOptions::lend_bytes.
#include <algorithm>
#include <cstdint>
#include <new>
#include <stdexcept>

#include "runtime/algorithms/algorithms.h"
#include "runtime/algorithms/ring_chunks.h"

namespace dtsim {
namespace {

// The peers' buffers this rank holds; released when the call ends, normally or not, so no
// peer's settle() waits on a rank that failed midway.
class Held {
 public:
  Held(Exchange& ex, Message* msgs, bool* taken) : ex_(ex), msgs_(msgs), taken_(taken) {
    std::fill(taken_, taken_ + ex_.size(), false);
  }
  ~Held() { release_all(); }
  Held(const Held&) = delete;
  Held& operator=(const Held&) = delete;
  // Releases every buffer held: once all peers released a rank's buffer it may return and
  // reuse it.
  void release_all() {
    for (int p = 0; p < ex_.size(); ++p) {
      if (taken_[p]) ex_.release(p, msgs_[p]);
      taken_[p] = false;
    }
  }
  // Peer p's buffer, held until release_all().
  void* take(int p, size_t count) {
    new (&msgs_[p]) Message(ex_.recv(p, 0, count));
    if (!msgs_[p].writable)
      throw std::logic_error("all_reduce shared: a peer's lend came read-only");
    taken_[p] = true;
    return msgs_[p].data;
  }

 private:
  Exchange& ex_;
  Message* msgs_;
  bool* taken_;
};

}  // namespace

void all_reduce_shared(Exchange& ex, void* data, size_t count, const Reducer& red) {
  const int n = ex.size();
  if (n == 1) return;
  if (!ex.lends(count) || !ex.shares_memory()) {
    all_reduce_deterministic(ex, data, count, red);
    return;
  }
  const int r = ex.rank();
  for (int p = 0; p < n; ++p) {
    if (p != r) ex.lend_shared(p, 0, data, count, p);
  }
  // Scratch (reused across calls): the N messages, N buffer pointers, N flags.
  const size_t un = static_cast<size_t>(n);
  const size_t msgs_bytes = (un * sizeof(Message) + 63) / 64 * 64;
  const size_t ptrs_bytes = (un * sizeof(void*) + 63) / 64 * 64;
  std::byte* s = ex.scratch(msgs_bytes + ptrs_bytes + un + 64);
  s = reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(s) + 63) / 64 * 64);
  auto* msgs = reinterpret_cast<Message*>(s);
  auto* bufs = reinterpret_cast<void**>(s + msgs_bytes);
  auto* taken = reinterpret_cast<bool*>(s + msgs_bytes + ptrs_bytes);
  {
    Held held(ex, msgs, taken);
    for (int p = 0; p < n; ++p) bufs[p] = p == r ? data : held.take(p, count);
    const Chunks ch{count, un};
    red.reduce_all(bufs, n, ch.offset(r), ch.size(r));
    // Traffic: chunk r read from and written to each peer, chunk p of this buffer by peer p.
    for (int p = 0; p < n; ++p) {
      if (p != r) ex.count_shared(p, 2 * ch.size(r), 2 * ch.size(p));
    }
  }  // releases the peers' buffers: they may return once all are released
  ex.settle();
  ex.snapshot(data, count);
}

}  // namespace dtsim
