// The controlled scheduler: a mode of the thread world (WorldOptions::scheduler) in which
// exactly one rank thread runs at a time. Every scheduling point of the transport (send,
// lend, receive, release of a lent message, settle) hands control to the scheduler,
// which asks its Strategy which runnable rank goes next. A rank whose wait cannot be met
// (an empty mailbox, unreleased lends, a full mailbox) is blocked, with a predicate the
// scheduler re-evaluates at every step; when no rank is runnable and some are blocked,
// the run fails at once with a DeadlockError naming who waits for whom. Every choice is
// recorded (record()), so that a failing interleaving can be replayed (make_replay).
//
// Deadlines: a rank waiting for its turn fails the run (TimeoutError) only when no step
// was taken for WorldOptions::timeout, i.e. the running rank is stuck outside the
// scheduler; a long run that keeps stepping never times out. Transport waits have no
// deadline here. A rank that catches an error goes on under the scheduler; its
// communicator is unusable (communicator.h) and throws before reaching the transport.
// Once the world failed every rank runs to its end: the ranks that can run go first, then
// each blocked rank whose wait does not hold gets one turn per round to see the failure,
// so a wait that outlasts the failure (a withdrawal waiting for its readers) cannot take
// every turn from the rank that would end it.
//
// One thread at a time hides weak-memory reorderings: the scheduler explores
// interleavings only; TSan covers the memory model.
//
// Thread safety: begin_run() between runs; the other calls from rank threads, which the
// scheduler serialises (a mutex for its state, one semaphore per rank for the turn).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <semaphore>
#include <string>
#include <vector>

#include "runtime/controller.h"
#include "runtime/schedule/strategy.h"
#include "runtime/transport/transport.h"
#include "runtime/types.h"

namespace dtsim {

// No rank could run and some were blocked, waiting on one another.
struct DeadlockError : Error {
  using Error::Error;
};

namespace schedule {

class Scheduler final : public Controller {
 public:
  // `strategy` is borrowed and must outlive every run under this scheduler.
  explicit Scheduler(Strategy* strategy) : strategy_(strategy) {}
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  void set_strategy(Strategy* strategy) { strategy_ = strategy; }
  // Seeds the next run's choices (Strategy::begin).
  void set_run_seed(uint64_t seed) { run_seed_ = seed; }

  // World::run, before the rank threads start the job.
  void begin_run(RunState* state, std::chrono::milliseconds turn_timeout) override;
  // A rank thread, before its job: waits until every rank arrived and it is chosen.
  void enter(int rank) override;
  // A rank thread, after its job returned or threw: hands the turn on.
  void leave(int rank) override;
  // A scheduling point: may hand the turn to another rank and wait to get it back.
  void yield(int rank, Point point) override;
  // The rank cannot go on until wait.ready() holds (or the world aborts): hands the turn
  // on and returns when it is chosen again. Callers re-check their condition in a loop.
  void block(int rank, const Wait& wait) override;

  // The last run's choices (between runs).
  const Record& record() const { return record_; }
  // "controlled schedule (pct depth 2, run seed 0x1f..., step 812, 7 preemptions); last
  // choices (step:rank) 780:2 ...", or "failed at step 790 of 812" once the world failed
  // (last = 0: without the choices): the schedule so far, with what replays it, for failure
  // reports (World's flight report, the desync report). Any thread, also while ranks run.
  std::string summary(size_t last) const override;
  // The strategy's divergence() after the last run ("" if none).
  std::string divergence() const { return strategy_->divergence(); }

 private:
  enum class State : uint8_t { kAbsent, kRunnable, kBlocked, kDone };
  // Chooses and records the next rank (fails the world on a deadlock); -1 when all done.
  int pick(int current);
  void hand_to(int next);
  void wait_turn(int rank);
  std::string summary_locked(size_t last) const;
  std::string deadlock_report() const;
  // No rank can run: fails the world with the watchdog's mismatch, else a DeadlockError.
  void fail_stuck();

  Strategy* strategy_;
  uint64_t run_seed_ = 0;
  RunState* state_ = nullptr;
  std::chrono::milliseconds turn_timeout_{60000};
  mutable std::mutex mu_;
  int arrived_ = 0;
  std::vector<State> states_;
  std::vector<Wait> waits_;
  std::vector<std::unique_ptr<std::binary_semaphore>> turn_;
  std::vector<int> runnable_;  // scratch for pick()
  // In a failed world: whether blocked rank r had its turn to see the failure this round.
  std::vector<uint8_t> abort_turns_;
  Record record_;
  int64_t failed_step_ = -1;   // the step at which the world was first seen failed
  bool free_running_ = false;  // a rank missed its turn deadline: control is given up
};

}  // namespace schedule
}  // namespace dtsim
