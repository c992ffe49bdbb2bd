#include "runtime/run_state.h"

namespace dtsim {

RunState::RunState(int size, const WorldOptions& options)
    : size_(size),
      options_(options),
      bells_(new Doorbell[size]),
      recorders_(new FlightRecorder[size]) {
  Doorbell::enable_asymmetric_fences();
}

void RunState::fail(int rank, std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(fail_mu_);
    bool consequence = false;
    std::string what;
    try {
      std::rethrow_exception(error);
    } catch (const AbortedError& e) {
      consequence = true;
      what = e.what();
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
      what = "unknown exception";
    }
    if (failure_ && !(failure_is_consequence_ && !consequence)) return;
    failed_rank_ = rank;
    failure_ = error;
    failure_what_ = std::move(what);
    failure_is_consequence_ = consequence;
    aborted_.store(true, std::memory_order_release);
  }
  for (int r = 0; r < size_; ++r) bells_[r].ring_always();
}

std::string RunState::abort_reason() {
  std::lock_guard<std::mutex> lock(fail_mu_);
  return "rank " + std::to_string(failed_rank_) + " failed: " + failure_what_;
}

void RunState::reset() {
  std::lock_guard<std::mutex> lock(fail_mu_);
  failure_ = nullptr;
  failed_rank_ = -1;
  failure_what_.clear();
  failure_is_consequence_ = false;
  aborted_.store(false, std::memory_order_release);
}

}  // namespace dtsim
