// State the rank threads of one World share: the mailboxes, the stashes, the doorbells,
// the world-wide payload budget, and the abort flag with the first failure. Internal to
// the runtime.
//
// Thread safety: channels, stashes and doorbells follow their own rules (mailbox.h,
// stash.h, doorbell.h); aborted() is an atomic read; fail() takes a mutex (never on the
// message path). The payload budget is one atomic, touched only when a pooled buffer is
// allocated or freed (a warm pool touches it not at all), and pressure() is a read of a
// line that changes only while some rank waits for the budget.
#pragma once

#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
#include <string>

#include "runtime/diagnostics/flight_recorder.h"
#include "runtime/transport/thread/doorbell.h"
#include "runtime/transport/thread/mailbox.h"
#include "runtime/transport/thread/stash.h"
#include "runtime/world.h"

namespace dtsim {

class WorldState {
 public:
  WorldState(int size, const WorldOptions& options);
  ~WorldState();
  WorldState(const WorldState&) = delete;
  WorldState& operator=(const WorldState&) = delete;

  int size() const { return size_; }
  const WorldOptions& options() const { return options_; }
  Channel& channel(int src, int dst) { return channels_[static_cast<size_t>(src) * size_ + dst]; }
  Doorbell& bell(int rank) { return bells_[rank]; }
  Stash& stash(int rank) { return stashes_[rank]; }
  // The rank's flight recorder and progress (flight_recorder.h), written by that rank.
  FlightRecorder& recorder(int rank) { return recorders_[rank]; }
  const FlightRecorder& recorder(int rank) const { return recorders_[rank]; }

  bool aborted() const { return aborted_.load(std::memory_order_acquire); }
  // Records `error` as rank's failure if it is the first, or if the first was an
  // AbortedError (a consequence: that rank saw another fail before the other's own
  // failure was recorded) and this one is not; then wakes every rank.
  void fail(int rank, std::exception_ptr error);
  // "rank 1 failed: <what>", for the abort errors of the other ranks.
  std::string abort_reason();
  int failed_rank() const { return failed_rank_; }
  std::exception_ptr failure() const { return failure_; }

  // The world-wide budget on pooled payload bytes (in flight, stashed, or cached for
  // reuse). False, and nothing allocated, if `size` does not fit now.
  bool try_allocate_payload(size_t size, PayloadBuffer* out);
  void free_payload(PayloadBuffer b);
  // Would try_allocate_payload(size) succeed now? No side effect (the controlled scheduler
  // asks it to tell whether a rank waiting for the budget can run).
  bool payload_fits(size_t size) const {
    return payload_bytes() + payload_capacity(size) <= options_.max_bytes_in_flight;
  }
  size_t payload_bytes() const { return payload_bytes_.load(std::memory_order_relaxed); }
  size_t payload_budget() const { return options_.max_bytes_in_flight; }
  // Frees the buffers cached in rank's outgoing channels (rank's thread, or between runs).
  void reclaim(int rank);
  // While some rank waits for the budget, receivers free buffers instead of caching them
  // and waiting ranks reclaim their caches.
  bool pressure() const { return budget_waiters_.load(std::memory_order_relaxed) != 0; }
  void begin_budget_wait();
  void end_budget_wait() { budget_waiters_.fetch_sub(1, std::memory_order_relaxed); }

  // After a run in which no rank failed, with no rank thread active: a message that was
  // sent and never received, as an error naming the sender, the receiver and both calls,
  // (and its receiver in *receiver), or "" if none was left (or every leftover belongs to a call
  // that failed and was caught).
  std::string undelivered_report(int* receiver) const;

  // Between runs, with no rank thread active: drops undelivered messages, frees cached
  // payload buffers, clears the abort.
  void reset();

 private:
  const int size_;
  const WorldOptions options_;
  std::unique_ptr<Channel[]> channels_;
  std::unique_ptr<Doorbell[]> bells_;
  std::unique_ptr<Stash[]> stashes_;
  alignas(64) std::atomic<size_t> payload_bytes_{0};
  alignas(64) std::atomic<int> budget_waiters_{0};
  std::unique_ptr<FlightRecorder[]> recorders_;
  std::atomic<bool> aborted_{false};
  std::mutex fail_mu_;
  int failed_rank_ = -1;
  std::exception_ptr failure_;
  std::string failure_what_;
  bool failure_is_consequence_ = false;  // failure_ is an AbortedError
};

}  // namespace dtsim
