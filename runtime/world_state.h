// State the rank threads of one World share: the mailboxes, the doorbells, and the abort
// flag with the first failure. Internal to the runtime.
//
// Thread safety: channels and doorbells follow their own rules (mailbox.h, doorbell.h);
// aborted() is an atomic read; fail() takes a mutex (never on the message path).
#pragma once

#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
#include <string>

#include "runtime/doorbell.h"
#include "runtime/flight_recorder.h"
#include "runtime/mailbox.h"
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
  // The rank's flight recorder and progress (flight_recorder.h), written by that rank.
  FlightRecorder& recorder(int rank) { return recorders_[rank]; }
  const FlightRecorder& recorder(int rank) const { return recorders_[rank]; }

  bool aborted() const { return aborted_.load(std::memory_order_acquire); }
  // Records `error` as rank's failure if it is the first, then wakes every rank.
  void fail(int rank, std::exception_ptr error);
  // "rank 1 failed: <what>", for the abort errors of the other ranks.
  std::string abort_reason();
  int failed_rank() const { return failed_rank_; }
  std::exception_ptr failure() const { return failure_; }

  // Between runs, with no rank thread active: drops undelivered messages, clears the abort.
  void reset();

 private:
  const int size_;
  const WorldOptions options_;
  std::unique_ptr<Channel[]> channels_;
  std::unique_ptr<Doorbell[]> bells_;
  std::unique_ptr<FlightRecorder[]> recorders_;
  std::atomic<bool> aborted_{false};
  std::mutex fail_mu_;
  int failed_rank_ = -1;
  std::exception_ptr failure_;
  std::string failure_what_;
};

}  // namespace dtsim
