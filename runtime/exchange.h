// One collective call in progress on one rank: what the algorithms use to talk. It maps
// communicator-local peers to global ranks, tags messages with (communicator, sequence,
// step), checks sizes, counts traffic, and records the trace (trace.h) when it is on.
// Internal to the runtime; an algorithm is a function of an Exchange and buffers.
#pragma once

#include <cstddef>

#include "runtime/communicator.h"
#include "runtime/rank_context.h"
#include "runtime/reduce_kernels.h"
#include "runtime/transport/transport.h"

namespace dtsim {

class Exchange;

// A decorator of one call's Exchange, for a bug planted by a test (planted.h): each hook sees
// an operation of the algorithm before (or after) the Exchange does it and may change it, so a
// planted bug perturbs one thing of a release algorithm instead of copying its body. The
// release runtime installs none (one untaken branch per operation).
//
// Thread safety: used only by the thread of the call it is installed on.
class ExchangeTap {
 public:
  struct Post {
    int peer;
    int step;
    const void* data;
    size_t count;
    int chunk;
  };
  virtual ~ExchangeTap() = default;
  // Before a send or lend; may change any field but the step.
  virtual void on_post(Exchange&, Post&) {}
  // Before a receive of `*count` elements (into `dst`; nullptr for recv()); may change the count.
  virtual void on_recv(Exchange&, int /*peer*/, int /*step*/, const void* /*dst*/,
                       size_t* /*count*/) {}
  // When recv() has taken `m` from `peer`, before the algorithm sees it.
  virtual void on_took(Exchange&, int /*peer*/, Message& /*m*/) {}
  // When recv_copy() or recv_reduce() of `step` is done (message used and released).
  virtual void on_done(Exchange&, int /*peer*/, int /*step*/) {}
  // Before release(); false skips it.
  virtual bool on_release(Exchange&, int /*peer*/, Message&) { return true; }
  // Before settle(); false skips it (the Exchange's destructor still withdraws the lends).
  virtual bool on_settle(Exchange&) { return true; }
};

class Exchange {
 public:
  Exchange(Communicator& comm, const Signature& sig);
  ~Exchange();
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;

  int rank() const { return comm_.rank_; }
  const WaitSite& site() const { return site_; }
  int size() const { return comm_.size(); }
  size_t esize() const { return esize_; }
  // Would send_or_lend lend `count` elements?
  bool lends(size_t count) const { return count * esize_ >= ctx_.lend_bytes; }
  // Byte address of element `i` of a buffer of this call's element type.
  std::byte* at(void* base, size_t i) const { return static_cast<std::byte*>(base) + i * esize_; }
  const std::byte* at(const void* base, size_t i) const {
    return static_cast<const std::byte*>(base) + i * esize_;
  }

  // Sends a snapshot of `count` elements to local rank `peer` as step `step`; `chunk`
  // only labels the trace.
  void send(int peer, int step, const void* data, size_t count, int chunk = -1) {
    post(peer, step, data, count, chunk, Post::kSend);
  }
  // Like send(), but a payload of WorldOptions::lend_bytes or more goes without a copy
  // (Transport::lend):
  // the receiver reads this rank's buffer in place, so the caller must not write those
  // elements until settle(), and the receiver must only read them (recv_copy, recv_reduce).
  // The single copy that halves the memory traffic of large ring collectives.
  void send_or_lend(int peer, int step, const void* data, size_t count, int chunk = -1) {
    post(peer, step, data, count, chunk, Post::kSendOrLend);
  }
  // Whether every peer of this communicator shares memory with this rank
  // (Transport::shares_memory): then lend_shared() lets peers write this rank's buffer.
  // The same answer on every rank of the communicator.
  bool shares_memory() const;
  // Lends `count` elements that `peer` may also write in place (Transport::lend_shared,
  // Message::writable) until settle(); the algorithm decides who touches which bytes.
  // Traffic: a shared lend moves no bytes by itself; what the algorithm reads from and writes
  // to peers' buffers is counted by count_shared().
  void lend_shared(int peer, int step, void* data, size_t count, int chunk = -1) {
    post(peer, step, data, count, chunk, Post::kLendShared);
  }
  // Counts, for a shared-memory algorithm, `moved` elements that this rank read from or wrote
  // to `peer`'s buffer as sent to it, and `moved_in` elements that `peer` read from or wrote to
  // this rank's buffer as received from it: the bytes that cross rank boundaries.
  void count_shared(int peer, size_t moved, size_t moved_in);
  // Waits until every peer released what this call lent it. Algorithms that lend call it
  // before they write a lent element again and before they return.
  void settle() {
    if (tap_ && !tap_->on_settle(*this)) [[unlikely]]
      return;
    settle_lends(/*unwinding=*/false);
  }
  // Receives step `step` from `peer`, which must hold exactly `count` elements. The caller
  // may modify the payload in place (unless Message::lent), then must release() it.
  Message recv(int peer, int step, size_t count);
  void release(int peer, Message& m);
  void recv_copy(int peer, int step, void* dst, size_t count);
  // acc = acc op received.
  void recv_reduce(int peer, int step, void* acc, size_t count, ReduceFn reduce);

  // Records `count` elements of `buf` as this rank's buffer at this point (trace only):
  // algorithms call it after each receive that changes what they want a learner to see.
  void snapshot(const void* buf, size_t count);
  // Composite algorithms (reduce then broadcast): the next phase's steps get fresh tags.
  // (Every rank must agree on tags, so a phase's base does not depend on how many steps
  // this rank happened to take part in.)
  void begin_phase() {
    done_steps_ += steps_;
    steps_ = 0;
    base_ += kPhaseTagStride;
  }
  // A temporary of at least `bytes`, reused across calls on this communicator.
  std::byte* scratch(size_t bytes);
  // Runs this call as the communication library's own collective (Algo::kMpi) on the
  // buffers given; type, reduction and root come from the call's signature. Throws
  // UsageError where the library's communicator is not this one (native_collectives.h).
  // The library does not say what it moved: the call's totals (not its per-peer traffic)
  // count the bytes of a bandwidth-optimal schedule, (N-1)/N of the data per rank and
  // phase (all_reduce: two phases), as the ring's counts do.
  void run_native(const void* in, void* data, size_t count);
  // Installs `tap` (nullptr: none) for the rest of this call; the caller keeps it alive
  // until it is replaced or the call ends.
  void set_tap(ExchangeTap* tap) { tap_ = tap; }
  // The phase (begin_phase() calls so far).
  int phase() const { return base_ / kPhaseTagStride; }

 private:
  void note_step(int step);
  Message take(int peer, int step, size_t count);  // recv() without the tap's on_recv
  enum class Post { kSend, kLend, kLendShared, kSendOrLend };
  void post(int peer, int step, const void* data, size_t count, int chunk, Post how);
  void settle_lends(bool unwinding);

  Communicator& comm_;
  RankContext& ctx_;
  Signature sig_;
  WaitSite site_;
  size_t esize_;
  static constexpr int kPhaseTagStride = 1 << 16;
  int base_ = 0;        // tag of step 0 of the current phase
  int steps_ = 0;       // steps of the current phase this rank took part in
  int done_steps_ = 0;  // steps of the finished phases
  PeerTraffic* peers_;  // this communicator's per-peer counters (RankCounters::groups)
  int64_t start_ns_ = 0;
  uint64_t bytes_sent_ = 0;
  int uncaught_ = 0;            // std::uncaught_exceptions() at entry: did the call fail?
  bool lent_ = false;           // lent anything not yet settled (which peers: comm_.lent_)
  ExchangeTap* tap_ = nullptr;  // a planted bug's decorator, or none
};

}  // namespace dtsim
