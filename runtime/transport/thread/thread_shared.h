// The thread transport's shared state in one World: the mailboxes, the stashes and the
// world-wide payload budget of this process's rank threads. It reports failures into the
// World's RunState (run_state.h) and wakes ranks through its doorbells.
//
// Thread safety: channels and stashes follow their own rules (mailbox.h, stash.h). The
// payload budget is one atomic, touched only when a pooled buffer is allocated or freed (a
// warm pool touches it not at all), and pressure() is a read of a line that changes only
// while some rank waits for the budget. undelivered_report() and reset() only between
// runs, with no rank thread active.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "runtime/run_state.h"
#include "runtime/transport/thread/mailbox.h"
#include "runtime/transport/thread/stash.h"

namespace dtsim {

class ThreadShared {
 public:
  explicit ThreadShared(RunState* run);
  ~ThreadShared();
  ThreadShared(const ThreadShared&) = delete;
  ThreadShared& operator=(const ThreadShared&) = delete;

  RunState& run() { return *run_; }
  // The World's, for the transport's convenience.
  int size() const { return size_; }
  const WorldOptions& options() const { return run_->options(); }
  Doorbell& bell(int rank) { return run_->bell(rank); }
  FlightRecorder& recorder(int rank) { return run_->recorder(rank); }
  bool aborted() const { return run_->aborted(); }
  std::string abort_reason() { return run_->abort_reason(); }

  Channel& channel(int src, int dst) { return channels_[static_cast<size_t>(src) * size_ + dst]; }
  Stash& stash(int rank) { return stashes_[rank]; }

  // The world-wide budget on pooled payload bytes (in flight, stashed, or cached for
  // reuse). False, and nothing allocated, if `size` does not fit now.
  bool try_allocate_payload(size_t size, PayloadBuffer* out);
  void free_payload(PayloadBuffer b);
  // Would try_allocate_payload(size) succeed now? No side effect (the controlled scheduler
  // asks it to tell whether a rank waiting for the budget can run).
  bool payload_fits(size_t size) const {
    return payload_bytes() + payload_capacity(size) <= budget_;
  }
  size_t payload_bytes() const { return payload_bytes_.load(std::memory_order_relaxed); }
  size_t payload_budget() const { return budget_; }
  // Frees the buffers cached in rank's outgoing channels (rank's thread, or between runs).
  void reclaim(int rank);
  // While some rank waits for the budget, receivers free buffers instead of caching them
  // and waiting ranks reclaim their caches.
  bool pressure() const { return budget_waiters_.load(std::memory_order_relaxed) != 0; }
  void begin_budget_wait();
  void end_budget_wait() { budget_waiters_.fetch_sub(1, std::memory_order_relaxed); }

  // After a run in which no rank failed: a message that was sent and never received, as
  // an error naming the sender, the receiver and both calls (and its receiver in
  // *receiver), or "" if none was left (or every leftover belongs to a call that failed
  // and was caught).
  std::string undelivered_report(int* receiver) const;

  // Between runs: drops undelivered messages and frees cached payload buffers.
  void reset();

 private:
  RunState* run_;
  const int size_;
  const size_t budget_;
  std::unique_ptr<Channel[]> channels_;
  std::unique_ptr<Stash[]> stashes_;
  alignas(64) std::atomic<size_t> payload_bytes_{0};
  alignas(64) std::atomic<int> budget_waiters_{0};
};

}  // namespace dtsim
