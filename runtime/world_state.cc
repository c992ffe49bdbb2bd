#include "runtime/world_state.h"

#include <vector>

#include "runtime/diagnostics/watchdog.h"

namespace dtsim {

PayloadBuffer allocate_payload(size_t size) {
  const size_t cap = payload_capacity(size);
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
      stashes_(new Stash[size]),
      recorders_(new FlightRecorder[size]) {
  Doorbell::enable_asymmetric_fences();
}

WorldState::~WorldState() { reset(); }

bool WorldState::try_allocate_payload(size_t size, PayloadBuffer* out) {
  const size_t cap = payload_capacity(size);
  const size_t before = payload_bytes_.fetch_add(cap, std::memory_order_relaxed);
  if (before + cap > options_.max_bytes_in_flight) {
    payload_bytes_.fetch_sub(cap, std::memory_order_relaxed);
    return false;
  }
  *out = allocate_payload(size);
  return true;
}

void WorldState::free_payload(PayloadBuffer b) {
  if (!b.data) return;
  dtsim::free_payload(b);
  payload_bytes_.fetch_sub(b.capacity, std::memory_order_relaxed);
}

void WorldState::reclaim(int rank) {
  for (int d = 0; d < size_; ++d) {
    channel(rank, d).free.consume_all([&](PayloadBuffer b) { free_payload(b); });
  }
}

void WorldState::begin_budget_wait() {
  if (budget_waiters_.fetch_add(1, std::memory_order_relaxed) != 0) return;
  for (int r = 0; r < size_; ++r) bells_[r].ring_always();  // sleepers: reclaim your caches
}

namespace {

// The entry of `rank`'s flight recorder for (comm, seq), if still in its ring.
bool find_call(const FlightRecorder& fr, uint64_t comm, uint64_t seq, FlightEntry* out) {
  for (const FlightEntry& e : fr.entries()) {
    if (e.comm == comm && e.seq == seq) {
      *out = e;
      return true;
    }
  }
  return false;
}

}  // namespace

std::string WorldState::undelivered_report(int* receiver) const {
  int src = -1, dst = -1;
  Envelope e;
  auto excused = [&](int s, int d) {
    return recorders_[s].failures() != 0 || recorders_[d].failures() != 0;
  };
  for (int d = 0; d < size_ && src < 0; ++d) {
    stashes_[d].for_each([&](int s, const Envelope& x) {
      if (src < 0 && !excused(s, d)) src = s, dst = d, e = x;
    });
    for (int s = 0; s < size_ && src < 0; ++s) {
      Envelope x;
      if (channels_[static_cast<size_t>(s) * size_ + d].mail.peek(x) && !excused(s, d)) {
        src = s, dst = d, e = x;
      }
    }
  }
  if (src < 0) return "";
  *receiver = dst;
  const std::string from = "rank " + std::to_string(src), to = "rank " + std::to_string(dst);
  if ((e.key.seq >> 63) != 0) {  // point to point (communicator.cc's key)
    return "undelivered message at the end of the run: " + from + " sent " + describe(e.sig) +
           " on tag " + std::to_string(static_cast<int32_t>((e.key.seq >> 32) & 0x7fffffffu)) +
           " (its message " + std::to_string(e.key.seq & 0xffffffffu) + " on that tag) to " + to +
           ", which never called the matching recv; every send needs a recv";
  }
  FlightEntry sent, got;
  const std::string comm =
      find_call(recorders_[src], e.key.comm, e.key.seq, &sent) ? sent.comm_name : "?";
  const bool called = find_call(recorders_[dst], e.key.comm, e.key.seq, &got);
  if (called && !(got.sig == e.sig)) {
    return "undelivered message at the end of the run: " +
           mismatch_message(e.key.seq, comm, src, e.sig, dst, got.sig);
  }
  std::string what = "undelivered message at the end of the run: " + from + " sent " +
                     describe(e.sig) + " (seq " + std::to_string(e.key.seq) + ", communicator " +
                     comm + ") to " + to + ", which ";
  if (called) {
    what += "called " + describe(got.sig) + " at that seq but never received it";
  } else {
    uint64_t calls = 0;  // dst's calls on that communicator still in its recorder
    for (const FlightEntry& x : recorders_[dst].entries()) calls += x.comm == e.key.comm;
    what += "never called seq " + std::to_string(e.key.seq) + " on that communicator (" +
            std::to_string(calls) +
            " call(s) there) and returned: it skipped this call or "
            "called fewer collectives";
  }
  return what + "; every rank must call the same collectives in the same order";
}

void WorldState::fail(int rank, std::exception_ptr error) {
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

std::string WorldState::abort_reason() {
  std::lock_guard<std::mutex> lock(fail_mu_);
  return "rank " + std::to_string(failed_rank_) + " failed: " + failure_what_;
}

void WorldState::reset() {
  auto drop = [&](const Envelope& e) {
    if (e.kind == PayloadKind::kPooled) free_payload({e.payload.buf.data, e.payload.buf.capacity});
  };
  for (int r = 0; r < size_; ++r) {
    stashes_[r].for_each([&](int, const Envelope& e) { drop(e); });
    stashes_[r].clear();
  }
  for (size_t i = 0; i < static_cast<size_t>(size_) * size_; ++i) {
    Channel& ch = channels_[i];
    ch.mail.consume_all([&](const Envelope& e) { drop(e); });
    ch.free.consume_all([&](PayloadBuffer b) { free_payload(b); });
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
  failure_is_consequence_ = false;
  aborted_.store(false, std::memory_order_release);
}

}  // namespace dtsim
