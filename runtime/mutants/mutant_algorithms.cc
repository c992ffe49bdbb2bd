// The planted algorithm bugs: copies of all_reduce_ring, all_gather_ring (and the
// deterministic all-reduce that ends in it) and all_reduce_shared, each with one bug, as
// registry rows that replace the release rows in a World (planted.h). The release files
// (runtime/algorithms/) carry none of this.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <new>
#include <stdexcept>

#include "runtime/algorithms/algorithms.h"
#include "runtime/algorithms/ring_chunks.h"
#include "runtime/mutants/mutants.h"

namespace dtsim::mutants {
namespace {

// all_reduce_ring.cc, with kRingWrongChunk (`wrong_chunk`: the last all-gather step sends
// chunk s + 1) or kMissingSettle (`skip_settle`: no settle() before returning).
void ring(Exchange& ex, void* data, size_t count, bool wrong_chunk, bool skip_settle,
          const Reducer& red) {
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
  ex.settle();
  for (int t = 0; t < n - 1; ++t) {
    const int step = n - 1 + t;
    int s = mod(r + 1 - t, n);
    if (wrong_chunk && t == n - 2 && n > 2) s = mod(s + 1, n);  // planted
    ex.send_or_lend(right, step, ex.at(data, ch.offset(s)), ch.size(s), s);
    const int c = mod(r - t, n);
    ex.recv_copy(left, step, ex.at(data, ch.offset(c)), ch.size(c));
    ex.snapshot(data, count);
  }
  if (!skip_settle) ex.settle();  // planted when skipped
}

// ring_chunks.h's Chunks with kSplitOffByOne: chunk n % parts of an uneven split gets an
// extra element too, which overlaps the next chunk (never past the end of the buffer).
struct OffByOneChunks {
  size_t count;
  size_t parts;
  size_t size(int i) const {
    const size_t k = static_cast<size_t>(i);
    if (count % parts && k == count % parts && k + 1 < parts && count >= parts)
      return count / parts + 1;
    return split_size(count, parts, k);
  }
  size_t offset(int i) const { return split_offset(count, parts, static_cast<size_t>(i)); }
};

// all_gather_ring.cc with kSplitOffByOne (`off_by_one`) or kLendOverwrite (`late`: the own
// chunk is put in place only after it was lent, when it is lent).
void gather(Exchange& ex, const void* in, void* out, size_t total, bool off_by_one, bool late_own) {
  const int n = ex.size();
  const int r = ex.rank();
  const Chunks even{total, static_cast<size_t>(n)};
  const OffByOneChunks odd{total, static_cast<size_t>(n)};
  auto size = [&](int i) { return off_by_one ? odd.size(i) : even.size(i); };
  std::byte* mine = ex.at(out, even.offset(r));
  const size_t own = split_size(total, n, r);
  const bool late = late_own && ex.lends(own);
  if (mine != in && own && !late) std::memmove(mine, in, own * ex.esize());
  const int right = mod(r + 1, n);
  const int left = mod(r - 1, n);
  for (int t = 0; t < n - 1; ++t) {
    const int s = mod(r - t, n);
    ex.send_or_lend(right, t, ex.at(out, even.offset(s)), size(s), s);
    const int c = mod(r - 1 - t, n);
    ex.recv_copy(left, t, ex.at(out, even.offset(c)), size(c));
    if (late && t == 0 && mine != in) std::memmove(mine, in, own * ex.esize());  // planted
    ex.snapshot(out, total);
  }
  ex.settle();
}

// all_reduce_deterministic.cc, ending in the planted gather.
void deterministic(Exchange& ex, void* data, size_t count, const Reducer& red, bool off_by_one,
                   bool late_own) {
  const Chunks ch{count, static_cast<size_t>(ex.size())};
  const int r = ex.rank();
  reduce_scatter_ordered(ex, data, count, ex.at(data, ch.offset(r)), red);
  ex.begin_phase();
  gather(ex, ex.at(data, ch.offset(r)), data, count, off_by_one, late_own);
}

// all_reduce_shared.cc with kSharedEarlyRelease (`early`: each peer's buffer released as
// soon as its pointer is taken) or kSharedReleaseBeforeSum (`before_sum`).
void shared(Exchange& ex, void* data, size_t count, const Reducer& red, bool early,
            bool before_sum) {
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
  const size_t un = static_cast<size_t>(n);
  const size_t msgs_bytes = (un * sizeof(Message) + 63) / 64 * 64;
  const size_t ptrs_bytes = (un * sizeof(void*) + 63) / 64 * 64;
  std::byte* s = ex.scratch(msgs_bytes + ptrs_bytes + un + 64);
  s = reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(s) + 63) / 64 * 64);
  auto* msgs = reinterpret_cast<Message*>(s);
  auto* bufs = reinterpret_cast<void**>(s + msgs_bytes);
  auto* taken = reinterpret_cast<bool*>(s + msgs_bytes + ptrs_bytes);
  std::fill(taken, taken + n, false);
  auto release_all = [&] {
    for (int p = 0; p < n; ++p) {
      if (taken[p]) ex.release(p, msgs[p]);
      taken[p] = false;
    }
  };
  try {
    for (int p = 0; p < n; ++p) {
      if (p == r) {
        bufs[p] = data;
        continue;
      }
      new (&msgs[p]) Message(ex.recv(p, 0, count));
      if (!msgs[p].writable)
        throw std::logic_error("all_reduce shared: a peer's lend came read-only");
      bufs[p] = msgs[p].data;
      taken[p] = !early;
      if (early) ex.release(p, msgs[p]);  // planted
    }
    if (before_sum) release_all();  // planted
    const Chunks ch{count, un};
    red.reduce_all(bufs, n, ch.offset(r), ch.size(r));
    for (int p = 0; p < n; ++p) {
      if (p != r) ex.count_shared(p, 2 * ch.size(r), 2 * ch.size(p));
    }
  } catch (...) {
    release_all();
    throw;
  }
  release_all();
  ex.settle();
  ex.snapshot(data, count);
}

void ring_wrong_chunk(Exchange& ex, const CollArgs& a) {
  ring(ex, a.data, a.count, true, false, *a.red);
}
void ring_missing_settle(Exchange& ex, const CollArgs& a) {
  ring(ex, a.data, a.count, false, true, *a.red);
}
void gather_off_by_one(Exchange& ex, const CollArgs& a) {
  gather(ex, a.in, a.data, a.count, true, false);
}
void gather_late_own(Exchange& ex, const CollArgs& a) {
  gather(ex, a.in, a.data, a.count, false, true);
}
void det_off_by_one(Exchange& ex, const CollArgs& a) {
  deterministic(ex, a.data, a.count, *a.red, true, false);
}
void det_late_own(Exchange& ex, const CollArgs& a) {
  deterministic(ex, a.data, a.count, *a.red, false, true);
}
void shared_early(Exchange& ex, const CollArgs& a) {
  shared(ex, a.data, a.count, *a.red, true, false);
}
void shared_before_sum(Exchange& ex, const CollArgs& a) {
  shared(ex, a.data, a.count, *a.red, false, true);
}

// The release rows' collective, algorithm and flags, with a planted function.
constexpr AlgoRow ar_ring(AlgoFn f) {
  return {OpKind::kAllReduce, Algo::kRing, f, false, kWorldBasic, "planted"};
}
constexpr AlgoRow ar_det(AlgoFn f) {
  return {OpKind::kAllReduce, Algo::kDeterministic, f, true, kWorldBasic, "planted"};
}
constexpr AlgoRow ar_shared(AlgoFn f) {
  return {OpKind::kAllReduce, Algo::kShared, f, true, kWorldBasic, "planted"};
}
constexpr AlgoRow ag_ring(AlgoFn f) {
  return {OpKind::kAllGather, Algo::kRing, f, true, kWorldBasic, "planted"};
}

constexpr AlgoRow kLendOverwrite[] = {ag_ring(gather_late_own), ar_det(det_late_own)};
constexpr AlgoRow kMissingSettle[] = {ar_ring(ring_missing_settle)};
constexpr AlgoRow kRingWrongChunk[] = {ar_ring(ring_wrong_chunk)};
constexpr AlgoRow kSplitOffByOne[] = {ag_ring(gather_off_by_one), ar_det(det_off_by_one)};
constexpr AlgoRow kSharedEarlyRelease[] = {ar_shared(shared_early)};
constexpr AlgoRow kSharedReleaseBeforeSum[] = {ar_shared(shared_before_sum)};

}  // namespace

const std::span<const AlgoRow> kLendOverwriteRows = kLendOverwrite;
const std::span<const AlgoRow> kMissingSettleRows = kMissingSettle;
const std::span<const AlgoRow> kRingWrongChunkRows = kRingWrongChunk;
const std::span<const AlgoRow> kSplitOffByOneRows = kSplitOffByOne;
const std::span<const AlgoRow> kSharedEarlyReleaseRows = kSharedEarlyRelease;
const std::span<const AlgoRow> kSharedReleaseBeforeSumRows = kSharedReleaseBeforeSum;

}  // namespace dtsim::mutants
