// The planted algorithm bugs: each runs the release row of its (collective, algorithm) from
// the registry with an ExchangeTap (exchange.h) that perturbs one thing: a chunk index, a
// settle, a chunk's length, when the own chunk is written, when a peer's buffer is
// released. No algorithm body is copied; the release files (runtime/algorithms/) carry
// none of this.
#include <cstring>
#include <vector>

#include "runtime/algorithms/algorithms.h"
#include "runtime/algorithms/ring_chunks.h"
#include "runtime/mutants/mutants.h"

namespace dtsim::mutants {
namespace {

// Runs the release row of (op, algo) on `args` with `tap` installed.
void run_tapped(OpKind op, Algo algo, Exchange& ex, const CollArgs& args, ExchangeTap& tap) {
  struct Installed {
    Exchange& ex;
    ~Installed() { ex.set_tap(nullptr); }
  } installed{ex};
  ex.set_tap(&tap);
  find_algorithm(op, algo)->run(ex, args);
}

// kRingWrongChunk: the ring all-reduce's last all-gather step (step 2N - 3, N > 2) sends
// chunk s + 1 in place of chunk s.
class WrongChunk final : public ExchangeTap {
 public:
  explicit WrongChunk(const CollArgs& a) : base_(a.data), count_(a.count) {}
  void on_post(Exchange& ex, Post& p) override {
    const int n = ex.size();
    if (n <= 2 || p.step != 2 * n - 3) return;
    const Chunks ch{count_, static_cast<size_t>(n)};
    p.chunk = mod(p.chunk + 1, n);
    p.data = ex.at(base_, ch.offset(p.chunk));
    p.count = ch.size(p.chunk);
  }

 private:
  void* base_;
  size_t count_;
};

// kMissingSettle: the ring all-reduce returns without its final (second) settle().
class MissingSettle final : public ExchangeTap {
 public:
  bool on_settle(Exchange&) override { return ++settles_ < 2; }

 private:
  int settles_ = 0;
};

// kSplitOffByOne: in the ring all-gather (phase `phase` of the call), chunk k = count % N of
// an uneven split is sent and received with one element too many, which overlaps chunk
// k + 1 (never past the end of the buffer); offsets stay right.
class SplitOffByOne final : public ExchangeTap {
 public:
  SplitOffByOne(const void* out, size_t total, int phase)
      : out_(out), total_(total), phase_(phase) {}
  void on_post(Exchange& ex, Post& p) override {
    if (affected(ex) == p.chunk && p.chunk >= 0) p.count += 1;
  }
  void on_recv(Exchange& ex, int, int, const void* dst, size_t* count) override {
    const int k = affected(ex);
    if (k >= 0 && dst == ex.at(out_, split_offset(total_, ex.size(), k))) *count += 1;
  }

 private:
  // The chunk that gets an extra element in this phase, or -1.
  int affected(const Exchange& ex) const {
    const size_t parts = static_cast<size_t>(ex.size());
    const size_t k = total_ % parts;
    if (ex.phase() != phase_ || k == 0 || k + 1 >= parts || total_ < parts) return -1;
    return static_cast<int>(k);
  }
  const void* out_;
  size_t total_;
  int phase_;
};

// kLendOverwrite: the ring all-gather puts its own chunk in place only after its first
// receive, although it lent that chunk in step 0 (when the chunk is large enough to lend).
// The release algorithm gets the chunk's place as its input, so it copies nothing itself.
class LateOwnChunk final : public ExchangeTap {
 public:
  LateOwnChunk(void* mine, const void* in, size_t bytes) : mine_(mine), in_(in), bytes_(bytes) {}
  void on_done(Exchange&, int, int step) override {
    if (step == 0) std::memmove(mine_, in_, bytes_);
  }

 private:
  void* mine_;
  const void* in_;
  size_t bytes_;
};

// kSharedEarlyRelease (`before_sum` false): the shared all-reduce releases each peer's
// buffer as soon as it holds the pointer. kSharedReleaseBeforeSum: it releases every
// peer's buffer once it holds them all, then sums. Later releases of those are skipped.
class EarlyRelease final : public ExchangeTap {
 public:
  EarlyRelease(int n, bool before_sum) : held_(n), released_(n, false), before_sum_(before_sum) {}
  void on_took(Exchange& ex, int peer, Message& m) override {
    if (!m.writable) return;  // not a shared lend (the deterministic fallback)
    if (!before_sum_) {
      Message released = m;  // release() may clear it; the algorithm still reads m
      ex.release(peer, released);
      released_[peer] = true;
      return;
    }
    held_[peer] = m;
    if (++taken_ < ex.size() - 1) return;
    for (int p = 0; p < ex.size(); ++p) {
      if (p == ex.rank()) continue;
      ex.release(p, held_[p]);
      released_[p] = true;
    }
  }
  bool on_release(Exchange&, int peer, Message& m) override {
    return !(m.writable && released_[peer]);
  }

 private:
  std::vector<Message> held_;
  std::vector<bool> released_;
  bool before_sum_;
  int taken_ = 0;
};

void ring_wrong_chunk(Exchange& ex, const CollArgs& a) {
  WrongChunk tap(a);
  run_tapped(OpKind::kAllReduce, Algo::kRing, ex, a, tap);
}
void ring_missing_settle(Exchange& ex, const CollArgs& a) {
  MissingSettle tap;
  run_tapped(OpKind::kAllReduce, Algo::kRing, ex, a, tap);
}
void gather_off_by_one(Exchange& ex, const CollArgs& a) {
  SplitOffByOne tap(a.data, a.count, 0);
  run_tapped(OpKind::kAllGather, Algo::kRing, ex, a, tap);
}
// The deterministic all-reduce ends in the ring all-gather (its phase 1).
void det_off_by_one(Exchange& ex, const CollArgs& a) {
  SplitOffByOne tap(a.data, a.count, 1);
  run_tapped(OpKind::kAllReduce, Algo::kDeterministic, ex, a, tap);
}
void gather_late_own(Exchange& ex, const CollArgs& a) {
  const int r = ex.rank();
  const size_t own = split_size(a.count, ex.size(), r);
  std::byte* mine = ex.at(a.data, split_offset(a.count, ex.size(), r));
  if (mine == a.in || own == 0 || !ex.lends(own)) {
    find_algorithm(OpKind::kAllGather, Algo::kRing)->run(ex, a);
    return;
  }
  LateOwnChunk tap(mine, a.in, own * ex.esize());
  CollArgs own_in_place = a;
  own_in_place.in = mine;
  run_tapped(OpKind::kAllGather, Algo::kRing, ex, own_in_place, tap);
}
void shared_early(Exchange& ex, const CollArgs& a) {
  EarlyRelease tap(ex.size(), false);
  run_tapped(OpKind::kAllReduce, Algo::kShared, ex, a, tap);
}
void shared_before_sum(Exchange& ex, const CollArgs& a) {
  EarlyRelease tap(ex.size(), true);
  run_tapped(OpKind::kAllReduce, Algo::kShared, ex, a, tap);
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

// lend-overwrite plants nothing in the deterministic all-reduce: its all-gather's own
// chunk is already in place (input == output), so the old copy ran the release schedule.
constexpr AlgoRow kLendOverwrite[] = {ag_ring(gather_late_own)};
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
