#include "runtime/schedule/scheduler.h"

#include <algorithm>
#include <cstdio>
#include <thread>

#include "runtime/diagnostics/watchdog.h"
#include "runtime/run_state.h"
#include "runtime/transport/transport_wait.h"

namespace dtsim::schedule {

void Scheduler::begin_run(RunState* state, std::chrono::milliseconds turn_timeout) {
  const int n = state->size();
  state_ = state;
  turn_timeout_ = turn_timeout;
  arrived_ = 0;
  free_running_ = false;
  states_.assign(n, State::kAbsent);
  waits_.assign(n, Wait{});
  abort_turns_.assign(n, 0);
  if (static_cast<int>(turn_.size()) != n) {
    turn_.clear();
    for (int r = 0; r < n; ++r) turn_.push_back(std::make_unique<std::binary_semaphore>(0));
  }
  record_ = Record{};
  failed_step_ = -1;
  strategy_->begin(n, run_seed_);
}

void Scheduler::enter(int rank) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    states_[rank] = State::kRunnable;
    // The first choice waits for every rank: which threads the OS started first must not
    // matter.
    if (++arrived_ == static_cast<int>(states_.size())) hand_to(pick(-1));
  }
  wait_turn(rank);
}

void Scheduler::leave(int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  states_[rank] = State::kDone;
  if (free_running_) return;
  const int next = pick(-1);
  if (next >= 0) hand_to(next);
}

void Scheduler::yield(int rank, Point /*point*/) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_running_) return;
    const int next = pick(rank);
    if (next == rank) return;
    hand_to(next);
  }
  wait_turn(rank);
}

void Scheduler::block(int rank, const Wait& wait) {
  bool free_running = false;  // read under the lock: wait_turn() sets it under the lock
  {
    std::lock_guard<std::mutex> lock(mu_);
    free_running = free_running_;
    if (!free_running) {
      states_[rank] = State::kBlocked;
      waits_[rank] = wait;
      const int next = pick(-1);
      if (next == rank) return;
      hand_to(next);
    }
  }
  if (free_running) {  // only after a lost turn (wait_turn): poll gently until the end
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return;
  }
  wait_turn(rank);
}

int Scheduler::pick(int current) {
  bool woken_for_abort = false;  // c is a blocked rank whose wait does not hold
  for (;;) {
    runnable_.clear();
    bool blocked = false;
    const bool aborted = state_->aborted();  // a failed world: every rank runs to its end
    if (aborted && failed_step_ < 0) failed_step_ = static_cast<int64_t>(record_.choices.size());
    for (int r = 0; r < static_cast<int>(states_.size()); ++r) {
      if (states_[r] == State::kRunnable) {
        runnable_.push_back(r);
      } else if (states_[r] == State::kBlocked) {
        if ((*waits_[r].ready)()) {
          runnable_.push_back(r);
        } else {
          blocked = true;
        }
      }
    }
    if (!runnable_.empty()) break;
    if (!blocked) return -1;
    if (aborted) {
      // Every blocked rank must get to see the failure, but only once no rank can run: a
      // wait that outlasts it (a withdrawal waits for its readers) would otherwise take
      // every turn from the reader that ends it. One such turn per rank per round, so a
      // rank that wakes and blocks again cannot starve the others.
      for (int pass = 0; pass < 2 && runnable_.empty(); ++pass) {
        for (int r = 0; r < static_cast<int>(states_.size()); ++r) {
          if (states_[r] == State::kBlocked && !abort_turns_[r]) runnable_.push_back(r);
        }
        if (runnable_.empty()) std::fill(abort_turns_.begin(), abort_turns_.end(), 0);
      }
      woken_for_abort = true;
      break;
    }
    fail_stuck();
  }
  int c = strategy_->choose(runnable_, current, record_.choices.size());
  if (!std::binary_search(runnable_.begin(), runnable_.end(), c)) c = runnable_.front();
  if (woken_for_abort) abort_turns_[c] = 1;
  record_.choices.push_back(c);
  record_.runnable_hash.push_back(hash_runnable(runnable_));
  record_.preempted.push_back(current >= 0 && c != current);
  states_[c] = State::kRunnable;
  return c;
}

void Scheduler::hand_to(int next) { turn_[next]->release(); }

void Scheduler::wait_turn(int rank) {
  // A deadline on lack of progress: waiting while other ranks take steps is fine.
  size_t seen = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    seen = record_.choices.size();
  }
  auto deadline = deadline_after(Clock::now(), turn_timeout_);
  for (;;) {
    const auto slice = std::min<Clock::duration>(deadline - Clock::now(), std::chrono::seconds(1));
    if (turn_[rank]->try_acquire_for(std::max<Clock::duration>(slice, Clock::duration::zero()))) {
      return;
    }
    if (Clock::now() < deadline) continue;
    std::lock_guard<std::mutex> lock(mu_);
    if (free_running_) return;
    if (record_.choices.size() != seen) {
      seen = record_.choices.size();
      deadline = deadline_after(Clock::now(), turn_timeout_);
      continue;
    }
    // The running rank kept the turn past the deadline without reaching a scheduling
    // point (a wait the scheduler does not know of): give up control and fail the run.
    free_running_ = true;
    for (size_t r = 0; r < turn_.size(); ++r) {
      if (static_cast<int>(r) != rank) turn_[r]->release();
    }
    state_->fail(rank, std::make_exception_ptr(TimeoutError(
                           "controlled scheduler: rank " + std::to_string(rank) + " waited " +
                           seconds_text(turn_timeout_) +
                           " for its turn while no rank took a step: the running rank waits "
                           "on something the scheduler does not know of; " +
                           summary_locked(16))));
    return;
  }
}

std::string Scheduler::summary(size_t last) const {
  std::lock_guard<std::mutex> lock(mu_);
  return summary_locked(last);
}

std::string Scheduler::summary_locked(size_t last) const {
  const size_t n = record_.choices.size();
  char seed[32];
  std::snprintf(seed, sizeof seed, "%#llx", static_cast<unsigned long long>(run_seed_));
  std::string out = "controlled schedule (" + strategy_->name() + ", run seed " + seed +
                    (failed_step_ >= 0 ? ", failed at step " + std::to_string(failed_step_) +
                                             " of " + std::to_string(n)
                                       : ", step " + std::to_string(n)) +
                    ", " + std::to_string(record_.preemptions()) + " preemptions)";
  if (last) out += "; last choices (step:rank)";
  for (size_t i = n > last ? n - last : 0; i < n; ++i) {
    out += " " + std::to_string(i) + ":" + std::to_string(record_.choices[i]);
  }
  return out;
}

void Scheduler::fail_stuck() {
  const int first = static_cast<int>(std::find(states_.begin(), states_.end(), State::kBlocked) -
                                     states_.begin());
  int rank = -1;
  std::string what;
  if (find_mismatch(*state_, &rank, &what)) {
    state_->fail(rank,
                 std::make_exception_ptr(MismatchError(what + " (" + summary_locked(0) + ")")));
    return;
  }
  state_->fail(first, std::make_exception_ptr(DeadlockError(deadlock_report())));
}

std::string Scheduler::deadlock_report() const {
  std::string out = "deadlock: no rank can run (" + summary_locked(0) + "):";
  for (size_t r = 0; r < states_.size(); ++r) {
    out += " rank " + std::to_string(r);
    if (states_[r] == State::kDone) {
      out += " returned from its job;";
      continue;
    }
    const Wait& w = waits_[r];
    const std::string peer = "rank " + std::to_string(w.peer);
    const bool peer_done = w.peer >= 0 && states_[w.peer] == State::kDone;
    out += " waits";
    if (w.site) {
      out += " in " + describe(w.site->sig) + " (seq " + std::to_string(w.site->seq) +
             ", communicator " + w.site->comm_name + ")";
    }
    switch (w.kind) {
      case WaitKind::kMessage:
        out += " for a message from " + peer + (peer_done ? ", which returned from its job" : "");
        break;
      case WaitKind::kRelease:
        out += " for " + peer + " to release what it lent it";
        break;
      case WaitKind::kRoom:
        out += " for room in its channel to " + peer;
        break;
      case WaitKind::kBudget:
        out += " for room in the world-wide budget of payloads in flight";
        break;
      case WaitKind::kReaders:
        out += " for " + peer + " to finish reading a withdrawn lend";
        break;
    }
    out += ";";
  }
  out.back() = '.';
  return out;
}

}  // namespace dtsim::schedule
