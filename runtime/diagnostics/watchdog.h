// The watchdog: a runtime service thread, owned by World, running a Boost.Asio io_context
// whose steady_timer ticks a few times per deadline. While a run is active each tick reads
// every rank's flight recorder (atomics only; nothing on the message path) and fails the
// world when two ranks are in the same collective (communicator, sequence number) with
// different fingerprints: MismatchError naming both calls. RunState::fail() then wakes
// every rank, which aborts cleanly. It does not time calls: deadlines belong to each
// blocking wait (a wait without progress for WorldOptions::timeout throws TimeoutError on
// the waiting rank, with the desync report below), so a slow call that keeps making
// progress is never stopped, and a caught TimeoutError never races a second one.
//
// Under the controlled scheduler (WorldOptions::scheduler) World keeps it inactive: a
// check at a random moment would make a schedule's outcome depend on time; the scheduler
// runs the same check (find_mismatch) when no rank can run, before it reports a deadlock.
//
// Thread safety: set_active() may be called from any thread; ticks run on the service
// thread and hold a mutex that set_active() also takes, so a tick never fails a world
// whose run has already ended.
#pragma once

#include <memory>
#include <string>

#include "runtime/diagnostics/flight_recorder.h"

namespace dtsim {

class RunState;

class Watchdog {
 public:
  explicit Watchdog(RunState* state);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Between runs the watchdog only sleeps.
  void set_active(bool active);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Per rank: the last completed collective and the call it is in (and the peer it waits
// for), then the lagging or missing ranks. Safe from any thread while ranks run.
std::string desync_report(const RunState& state);

// The watchdog's check: true, with the first rank of the pair and the mismatch message,
// when two ranks are in the same collective with different fingerprints. Safe from any
// thread while ranks run (the controlled scheduler calls it when no rank can run).
bool find_mismatch(const RunState& state, int* rank, std::string* what);

// "collective mismatch at seq 17: rank 0 called all_reduce(...), rank 2 called
// broadcast(...) (communicator world, global ranks); ..." with the ranks in order.
std::string mismatch_message(uint64_t seq, const std::string& comm_name, int rank_a,
                             const Signature& a, int rank_b, const Signature& b);

}  // namespace dtsim
