#include "runtime/diagnostics/flight_recorder.h"

#include <cstdio>
#include <cstring>

#include "runtime/fast_clock.h"

namespace dtsim {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kRelaxed = std::memory_order_relaxed;
// The seqlock without fences (ThreadSanitizer does not model them): a writer marks the
// slot odd, then stores each field with release, so a reader that loads (acquire) any new
// field also sees the odd version when it re-reads the version after its loads.
constexpr auto kPublish = std::memory_order_release;
constexpr auto kObserve = std::memory_order_acquire;

Clock::time_point from_ns(int64_t ns) {
  return Clock::time_point(
      std::chrono::duration_cast<Clock::duration>(std::chrono::nanoseconds(ns)));
}

uint64_t pack(const Signature& s) {
  return uint64_t(static_cast<uint8_t>(s.op)) | uint64_t(static_cast<uint8_t>(s.dtype)) << 8 |
         uint64_t(static_cast<uint8_t>(s.reduce)) << 16 |
         uint64_t(static_cast<uint8_t>(s.algo)) << 24 |
         uint64_t(static_cast<uint32_t>(s.root)) << 32;
}

Signature unpack(uint64_t bits, uint64_t count) {
  Signature s;
  s.op = static_cast<OpKind>(bits & 0xff);
  s.dtype = static_cast<DType>((bits >> 8) & 0xff);
  s.reduce = static_cast<ReduceOp>((bits >> 16) & 0xff);
  s.algo = static_cast<Algo>((bits >> 24) & 0xff);
  s.root = static_cast<int32_t>(static_cast<uint32_t>(bits >> 32));
  s.count = count;
  return s;
}

}  // namespace

const char* to_string(CallState s) {
  switch (s) {
    case CallState::kRunning:
      return "running";
    case CallState::kDone:
      return "done";
    case CallState::kFailed:
      return "failed";
  }
  return "?";
}

const char* to_string(RankPhase p) {
  switch (p) {
    case RankPhase::kIdle:
      return "idle";
    case RankPhase::kRunning:
      return "running its job";
    case RankPhase::kFinished:
      return "returned from its job";
    case RankPhase::kFailed:
      return "failed";
  }
  return "?";
}

std::string describe(const FlightEntry& e) {
  char timing[96];
  const double ms = std::chrono::duration<double, std::milli>(
                        (e.state == CallState::kRunning ? Clock::now() : e.end) - e.start)
                        .count();
  std::snprintf(timing, sizeof timing, " %s %.3f ms, sent %llu B",
                e.state == CallState::kRunning ? "running for" : "took", ms,
                static_cast<unsigned long long>(e.bytes_sent));
  return e.comm_name + "#" + std::to_string(e.seq) + " " + dtsim::describe(e.sig) + " " +
         to_string(e.state) + "," + timing;
}

int64_t FlightRecorder::begin(uint64_t comm, const std::string& comm_name, uint64_t seq,
                              const Signature& sig) {
  const uint64_t call = head_.load(kRelaxed);
  Slot& s = slots_[call % kDepth];
  const uint32_t v = s.version.load(kRelaxed);
  s.version.store(v + 1, kRelaxed);
  s.call.store(call, kPublish);
  s.comm.store(comm, kPublish);
  s.seq.store(seq, kPublish);
  s.sig_bits.store(pack(sig), kPublish);
  s.count.store(sig.count, kPublish);
  s.bytes.store(0, kPublish);
  const int64_t now = FastClock::now_ns();
  s.start_ns.store(now, kPublish);
  s.end_ns.store(0, kPublish);
  s.state.store(static_cast<uint8_t>(CallState::kRunning), kPublish);
  uint64_t words[4] = {0, 0, 0, 0};
  std::memcpy(words, comm_name.data(), std::min<size_t>(comm_name.size(), sizeof words - 1));
  for (int i = 0; i < 4; ++i) s.name[i].store(words[i], kPublish);
  s.version.store(v + 2, std::memory_order_release);
  head_.store(call + 1, std::memory_order_release);
  return now;
}

int64_t FlightRecorder::end(CallState state, uint64_t bytes_sent) {
  const int64_t now = FastClock::now_ns();
  const uint64_t call = head_.load(kRelaxed);
  if (call == 0) return now;
  Slot& s = slots_[(call - 1) % kDepth];
  const uint32_t v = s.version.load(kRelaxed);
  s.version.store(v + 1, kRelaxed);
  s.bytes.store(bytes_sent, kPublish);
  s.end_ns.store(now, kPublish);
  s.state.store(static_cast<uint8_t>(state), kPublish);
  s.version.store(v + 2, std::memory_order_release);
  if (state == CallState::kFailed) note_failure();
  return now;
}

bool FlightRecorder::read(uint64_t index, FlightEntry* out, bool with_name) const {
  const Slot& s = slots_[index % kDepth];
  for (int attempt = 0; attempt < 64; ++attempt) {
    const uint32_t v1 = s.version.load(std::memory_order_acquire);
    if (v1 & 1) continue;
    const uint64_t call = s.call.load(kObserve);
    FlightEntry e;
    e.comm = s.comm.load(kObserve);
    e.seq = s.seq.load(kObserve);
    e.sig = unpack(s.sig_bits.load(kObserve), s.count.load(kObserve));
    e.bytes_sent = s.bytes.load(kObserve);
    e.start = from_ns(s.start_ns.load(kObserve));
    e.end = from_ns(s.end_ns.load(kObserve));
    e.state = static_cast<CallState>(s.state.load(kObserve));
    char name[33] = {};
    for (int i = 0; with_name && i < 4; ++i) {
      const uint64_t w = s.name[i].load(kObserve);
      std::memcpy(name + 8 * i, &w, 8);
    }
    if (s.version.load(kRelaxed) != v1) continue;
    if (call != index) return false;
    if (with_name) e.comm_name = name;
    *out = std::move(e);
    return true;
  }
  return false;
}

bool FlightRecorder::current(FlightEntry* out) const {
  const uint64_t head = head_.load(std::memory_order_acquire);
  return head != 0 && read(head - 1, out) && out->state == CallState::kRunning;
}

bool FlightRecorder::current_fingerprint(uint64_t* comm, uint64_t* seq, Signature* sig) const {
  FlightEntry e;
  const uint64_t head = head_.load(std::memory_order_acquire);
  if (head == 0 || !read(head - 1, &e, false) || e.state != CallState::kRunning) return false;
  *comm = e.comm;
  *seq = e.seq;
  *sig = e.sig;
  return true;
}

// A failed call is not completed: a rank whose call timed out and returned before another
// rank's report was written still last completed the call before it.
bool FlightRecorder::last_done(FlightEntry* out) const {
  const uint64_t head = head_.load(std::memory_order_acquire);
  for (uint64_t i = head; i > 0 && head - i < kDepth; --i) {
    if (read(i - 1, out) && out->state == CallState::kDone) return true;
  }
  return false;
}

std::vector<FlightEntry> FlightRecorder::entries() const {
  const uint64_t head = head_.load(std::memory_order_acquire);
  std::vector<FlightEntry> out;
  for (uint64_t i = head > kDepth ? head - kDepth : 0; i < head; ++i) {
    FlightEntry e;
    if (read(i, &e)) out.push_back(std::move(e));
  }
  return out;
}

void FlightRecorder::reset() {
  head_.store(0, std::memory_order_release);
  waiting_on_.store(-1, kRelaxed);
  failures_.store(0, kRelaxed);
  phase_.store(RankPhase::kIdle, std::memory_order_release);
}

}  // namespace dtsim
