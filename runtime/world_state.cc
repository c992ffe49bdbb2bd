#include "runtime/world_state.h"

namespace dtsim {

PayloadBuffer allocate_payload(size_t size) {
  size_t cap = 64;
  while (cap < size) cap *= 2;
  auto* p = static_cast<std::byte*>(::operator new (cap, std::align_val_t{64}));
  return {p, cap};
}

void free_payload(PayloadBuffer b) {
  if (b.data) ::operator delete (b.data, std::align_val_t{64});
}

WorldState::WorldState(int size, const WorldOptions& options)
    : size_(size),
      options_(options),
      channels_(new Channel[static_cast<size_t>(size) * size]),
      bells_(new Doorbell[size]),
      recorders_(new FlightRecorder[size]) {
  Doorbell::enable_asymmetric_fences();
}

WorldState::~WorldState() {
  reset();
  for (size_t i = 0; i < static_cast<size_t>(size_) * size_; ++i) {
    channels_[i].free.consume_all([](PayloadBuffer b) { free_payload(b); });
  }
}

void WorldState::fail(int rank, std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(fail_mu_);
    if (failure_) return;
    failed_rank_ = rank;
    failure_ = error;
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      failure_what_ = e.what();
    } catch (...) {
      failure_what_ = "unknown exception";
    }
    aborted_.store(true, std::memory_order_release);
  }
  for (int r = 0; r < size_; ++r) bells_[r].ring_always();
}

std::string WorldState::abort_reason() {
  std::lock_guard<std::mutex> lock(fail_mu_);
  return "rank " + std::to_string(failed_rank_) + " failed: " + failure_what_;
}

void WorldState::reset() {
  for (size_t i = 0; i < static_cast<size_t>(size_) * size_; ++i) {
    Channel& ch = channels_[i];
    auto drop = [&](const Envelope& e) {
      if (e.kind == PayloadKind::kPooled) {
        free_payload({e.payload.buf.data, e.payload.buf.capacity});
      }
    };
    ch.mail.consume_all(drop);
    for (const Envelope& e : ch.stash) drop(e);
    ch.stash.clear();
    ch.large_bytes.store(0, std::memory_order_relaxed);
    // Lent messages left in the mailbox, or claimed by a rank that failed before releasing
    // them, are read by no one now.
    ch.lends_released.store(ch.lends_sent, std::memory_order_relaxed);
    ch.lends_reading.store(0, std::memory_order_relaxed);
    ch.lends_written_off = 0;
  }
  std::lock_guard<std::mutex> lock(fail_mu_);
  failure_ = nullptr;
  failed_rank_ = -1;
  failure_what_.clear();
  aborted_.store(false, std::memory_order_release);
}

}  // namespace dtsim
