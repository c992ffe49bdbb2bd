// What every rank and every transport plug-in of one World share, whatever carries the
// messages: the options, each rank's doorbell (how a waiting rank is woken) and flight
// recorder, and the run's abort flag with its first failure. The transports keep their own
// state (the thread transport's mailboxes: transport/thread/thread_shared.h; MPI's link:
// transport/mpi/mpi_link.h) and report into this one. Internal to the runtime.
//
// Thread safety: doorbells and recorders follow their own rules (doorbell.h,
// flight_recorder.h); aborted() is an atomic read; fail() takes a mutex (never on the
// message path); reset() only between runs, with no rank thread active.
#pragma once

#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
#include <string>

#include "runtime/diagnostics/flight_recorder.h"
#include "runtime/doorbell.h"
#include "runtime/world.h"

namespace dtsim {

class RunState {
 public:
  RunState(int size, const WorldOptions& options);
  RunState(const RunState&) = delete;
  RunState& operator=(const RunState&) = delete;

  int size() const { return size_; }
  const WorldOptions& options() const { return options_; }
  Doorbell& bell(int rank) { return bells_[rank]; }
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
  // Between runs: clears the abort.
  void reset();

 private:
  const int size_;
  const WorldOptions options_;
  std::unique_ptr<Doorbell[]> bells_;
  std::unique_ptr<FlightRecorder[]> recorders_;
  std::atomic<bool> aborted_{false};
  std::mutex fail_mu_;
  int failed_rank_ = -1;
  std::exception_ptr failure_;
  std::string failure_what_;
  bool failure_is_consequence_ = false;  // failure_ is an AbortedError
};

}  // namespace dtsim
