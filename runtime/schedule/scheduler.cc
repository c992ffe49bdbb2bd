#include "runtime/schedule/scheduler.h"

#include <algorithm>
#include <thread>

#include "runtime/world_state.h"

namespace dtsim::schedule {

void Scheduler::begin_run(WorldState* state, std::chrono::milliseconds turn_timeout) {
  const int n = state->size();
  state_ = state;
  turn_timeout_ = turn_timeout;
  arrived_ = 0;
  free_running_ = false;
  states_.assign(n, State::kAbsent);
  waits_.assign(n, Wait{});
  if (static_cast<int>(turn_.size()) != n) {
    turn_.clear();
    for (int r = 0; r < n; ++r) turn_.push_back(std::make_unique<std::binary_semaphore>(0));
  }
  record_ = Record{};
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
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!free_running_) {
      states_[rank] = State::kBlocked;
      waits_[rank] = wait;
      const int next = pick(-1);
      if (next == rank) return;
      hand_to(next);
    }
  }
  if (free_running_) {  // only after a lost turn (wait_turn): poll gently until the end
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return;
  }
  wait_turn(rank);
}

int Scheduler::pick(int current) {
  for (;;) {
    runnable_.clear();
    bool blocked = false;
    const bool aborted = state_->aborted();  // a failed world: every rank runs to its end
    for (int r = 0; r < static_cast<int>(states_.size()); ++r) {
      if (states_[r] == State::kRunnable) {
        runnable_.push_back(r);
      } else if (states_[r] == State::kBlocked) {
        if (aborted || (*waits_[r].ready)()) {
          runnable_.push_back(r);
        } else {
          blocked = true;
        }
      }
    }
    if (!runnable_.empty()) break;
    if (!blocked) return -1;
    const int first = static_cast<int>(std::find(states_.begin(), states_.end(), State::kBlocked) -
                                       states_.begin());
    state_->fail(first, std::make_exception_ptr(DeadlockError(deadlock_report())));
  }
  int c = strategy_->choose(runnable_, current, record_.choices.size());
  if (!std::binary_search(runnable_.begin(), runnable_.end(), c)) c = runnable_.front();
  record_.choices.push_back(c);
  record_.runnable_hash.push_back(hash_runnable(runnable_));
  record_.preempted.push_back(current >= 0 && c != current);
  states_[c] = State::kRunnable;
  return c;
}

void Scheduler::hand_to(int next) { turn_[next]->release(); }

void Scheduler::wait_turn(int rank) {
  if (turn_[rank]->try_acquire_for(turn_timeout_)) return;
  // The running rank kept the turn past the deadline without reaching a scheduling
  // point (a wait the scheduler does not know of): give up control and fail the run.
  std::lock_guard<std::mutex> lock(mu_);
  if (free_running_) return;
  free_running_ = true;
  for (size_t r = 0; r < turn_.size(); ++r) {
    if (static_cast<int>(r) != rank) turn_[r]->release();
  }
  state_->fail(rank,
               std::make_exception_ptr(TimeoutError(
                   "controlled scheduler: rank " + std::to_string(rank) +
                   " was not given the turn back within " + std::to_string(turn_timeout_.count()) +
                   " ms: the running rank waits on something the scheduler does not "
                   "know of")));
}

std::string Scheduler::summary(size_t last) const {
  const size_t n = record_.choices.size();
  std::string out = "controlled schedule: " + std::to_string(n) + " steps, " +
                    std::to_string(record_.preemptions()) +
                    " preemptions; last choices (step:rank)";
  for (size_t i = n > last ? n - last : 0; i < n; ++i) {
    out += " " + std::to_string(i) + ":" + std::to_string(record_.choices[i]);
  }
  return out;
}

std::string Scheduler::deadlock_report() const {
  std::string out = "deadlock: no rank can run (controlled scheduler, step " +
                    std::to_string(record_.choices.size()) + "):";
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
