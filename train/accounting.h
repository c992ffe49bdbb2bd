// What every strategy measures the same way: peak memory by category, a rank's timeline of
// phases and collectives (for --trace), and step wall times. The step runner
// (step_runner.h) owns them for each rank.
//
// Thread safety: PeakMemory and RankTimeline belong to one rank thread.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <vector>

#include "model/hooks.h"
#include "model/memory.h"
#include "runtime/communicator.h"
#include "train/result.h"

namespace dtsim::train {

// The largest live bytes seen per category across the calls to observe().
class PeakMemory {
 public:
  // Model-state categories are read from `state` (live bytes), activations from
  // `activations` (its peak: recomputation frees states inside a step).
  void observe(const model::MemoryLedger& state, const model::MemoryLedger& activations);
  void observe(const model::MemoryLedger& all) { observe(all, all); }
  const std::array<int64_t, model::kNumMemoryCategories>& bytes() const { return peak_; }

 private:
  std::array<int64_t, model::kNumMemoryCategories> peak_{};
};

// Appends phases and collectives to a rank's timeline; does nothing when `events` is null.
class RankTimeline {
 public:
  explicit RankTimeline(std::vector<PhaseEvent>* events) : events_(events) {}

  // Opens phase `name` now; close() ends the most recently opened one that is still open.
  void open(const char* name);
  void close();

  // Runs fn() (one collective on `comm`) and records it with the bytes this rank sent.
  template <class F>
  void collective(const char* name, Communicator& comm, F&& fn) {
    if (events_ == nullptr) {
      fn();
      return;
    }
    const uint64_t before = comm.counters().total().bytes_sent;
    PhaseEvent e;
    e.name = name;
    e.start = std::chrono::steady_clock::now();
    fn();
    e.end = std::chrono::steady_clock::now();
    e.bytes = comm.counters().total().bytes_sent - before;
    events_->push_back(std::move(e));
  }

  // Runs fn() and records it as phase `name`.
  template <class F>
  void phase(const char* name, F&& fn) {
    open(name);
    fn();
    close();
  }

 private:
  std::vector<PhaseEvent>* events_;
  std::vector<size_t> open_;  // indices of open phases in *events_
};

// Median of per-step wall seconds over the steps after the first (all when only one).
double median_seconds(std::vector<double> seconds);

// Seconds since `start`.
inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace dtsim::train

namespace dtsim::train {

// Layer hooks that time the forward and backward phases of one forward_backward call on a
// rank's timeline; strategies derive from it to add their communication. Call finish()
// after forward_backward returns.
class PhaseHooks : public model::LayerHooks {
 public:
  explicit PhaseHooks(RankTimeline* timeline) : timeline_(timeline) {}
  void before_forward(int /*layer*/) override {
    if (state_ == State::kIdle) timeline_->open("forward");
    if (state_ == State::kIdle) state_ = State::kForward;
  }
  void before_backward(int /*layer*/) override {
    if (state_ != State::kForward) return;
    timeline_->close();
    timeline_->open("backward");
    state_ = State::kBackward;
  }
  void finish() {
    if (state_ != State::kIdle) timeline_->close();
    state_ = State::kIdle;
  }

 protected:
  RankTimeline* timeline_;

 private:
  enum class State { kIdle, kForward, kBackward };
  State state_ = State::kIdle;
};

}  // namespace dtsim::train
