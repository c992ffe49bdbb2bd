#include "runtime/transport/thread/thread_shared.h"

#include <vector>

#include "runtime/diagnostics/watchdog.h"

namespace dtsim {

ThreadShared::ThreadShared(RunState* run)
    : run_(run),
      size_(run->size()),
      budget_(run->options().max_bytes_in_flight),
      channels_(new Channel[static_cast<size_t>(size_) * size_]),
      stashes_(new Stash[size_]) {}

ThreadShared::~ThreadShared() { reset(); }

bool ThreadShared::try_allocate_payload(size_t size, PayloadBuffer* out) {
  const size_t cap = payload_capacity(size);
  const size_t before = payload_bytes_.fetch_add(cap, std::memory_order_relaxed);
  if (before + cap > budget_) {
    payload_bytes_.fetch_sub(cap, std::memory_order_relaxed);
    return false;
  }
  *out = allocate_payload(size);
  return true;
}

void ThreadShared::free_payload(PayloadBuffer b) {
  if (!b.data) return;
  dtsim::free_payload(b);
  payload_bytes_.fetch_sub(b.capacity, std::memory_order_relaxed);
}

void ThreadShared::reclaim(int rank) {
  for (int d = 0; d < size_; ++d) {
    channel(rank, d).free.consume_all([&](PayloadBuffer b) { free_payload(b); });
  }
}

void ThreadShared::begin_budget_wait() {
  if (budget_waiters_.fetch_add(1, std::memory_order_relaxed) != 0) return;
  for (int r = 0; r < size_; ++r) run_->bell(r).ring_always();  // sleepers: reclaim your caches
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

std::string ThreadShared::undelivered_report(int* receiver) const {
  int src = -1, dst = -1;
  Envelope e;
  auto excused = [&](int s, int d) {
    return run_->recorder(s).failures() != 0 || run_->recorder(d).failures() != 0;
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
      find_call(run_->recorder(src), e.key.comm, e.key.seq, &sent) ? sent.comm_name : "?";
  const bool called = find_call(run_->recorder(dst), e.key.comm, e.key.seq, &got);
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
    for (const FlightEntry& x : run_->recorder(dst).entries()) calls += x.comm == e.key.comm;
    what += "never called seq " + std::to_string(e.key.seq) + " on that communicator (" +
            std::to_string(calls) +
            " call(s) there) and returned: it skipped this call or "
            "called fewer collectives";
  }
  return what + "; every rank must call the same collectives in the same order";
}

void ThreadShared::reset() {
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
}

}  // namespace dtsim
