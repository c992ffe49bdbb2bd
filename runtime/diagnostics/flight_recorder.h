// The flight recorder: each rank keeps a fixed-size ring of its last kDepth collective
// calls (communicator, sequence number, fingerprint, state, timings) and publishes what it
// is doing right now (running its job or finished, blocked waiting for which peer). The
// watchdog, the desync report and the mismatch checks read it from other threads; World
// exposes it for `--report` output after a run.
//
// Thread safety: one writer, the owning rank's thread (begin/end/set_*), and any number
// of readers on other threads. Every field is an atomic; each ring slot is a seqlock
// (odd version while being written), so a reader gets a consistent entry or retries.
// Storage is allocated once, at construction: no allocation or lock on the write side.
// reset() may only run while the owning rank is outside a run.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/transport/transport.h"

namespace dtsim {

enum class CallState : uint8_t { kRunning, kDone, kFailed };
const char* to_string(CallState s);

// Where a rank is in its job.
enum class RankPhase : uint8_t { kIdle, kRunning, kFinished, kFailed };
const char* to_string(RankPhase p);

// One collective call as the recorder saw it (a plain copy, safe to keep).
struct FlightEntry {
  uint64_t comm = 0;      // communicator id
  std::string comm_name;  // "world", "group[0,2]" (truncated to 31 characters)
  uint64_t seq = 0;       // sequence number on that communicator
  Signature sig;
  CallState state = CallState::kRunning;
  uint64_t bytes_sent = 0;
  std::chrono::steady_clock::time_point start{};
  std::chrono::steady_clock::time_point end{};  // meaningful once state != kRunning
};

// "world#5 all_reduce(numel=8, ...) done in 0.12 ms, sent 64 B".
std::string describe(const FlightEntry& e);

class FlightRecorder {
 public:
  static constexpr size_t kDepth = 64;

  FlightRecorder() = default;
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  // Owner thread. begin() opens a call; end() closes the call begin() opened last. Each
  // returns the time it stamped (FastClock nanoseconds), so callers need not read it again.
  int64_t begin(uint64_t comm, const std::string& comm_name, uint64_t seq, const Signature& sig);
  int64_t end(CallState state, uint64_t bytes_sent);
  // The global rank this rank is blocked receiving from, or -1.
  void set_waiting_on(int peer) { waiting_on_.store(peer, std::memory_order_relaxed); }
  void set_phase(RankPhase p) { phase_.store(p, std::memory_order_release); }
  // A call of this rank failed in this run (collective or point to point): messages it
  // left unreceived, or sent and never saw received, belong to that failure.
  void note_failure() { failures_.fetch_add(1, std::memory_order_relaxed); }

  // Any thread.
  RankPhase phase() const { return phase_.load(std::memory_order_acquire); }
  int waiting_on() const { return waiting_on_.load(std::memory_order_relaxed); }
  uint64_t calls() const { return head_.load(std::memory_order_acquire); }
  uint32_t failures() const { return failures_.load(std::memory_order_relaxed); }
  // The call in progress, if any.
  bool current(FlightEntry* out) const;
  // Like current(), without the communicator name: no allocation (message path).
  bool current_fingerprint(uint64_t* comm, uint64_t* seq, Signature* sig) const;
  // The most recent call that has completed (not failed), if any is still in the ring.
  bool last_done(FlightEntry* out) const;
  // The ring, oldest first (allocates: for reports only).
  std::vector<FlightEntry> entries() const;

  // Between runs: forgets every call and returns to kIdle.
  void reset();

 private:
  struct Slot {
    std::atomic<uint32_t> version{0};
    std::atomic<uint64_t> call{~0ull};  // which call (head_ index) the slot holds
    std::atomic<uint64_t> comm{0};
    std::atomic<uint64_t> seq{0};
    std::atomic<uint64_t> sig_bits{0};
    std::atomic<uint64_t> count{0};
    std::atomic<uint64_t> bytes{0};
    std::atomic<int64_t> start_ns{0};
    std::atomic<int64_t> end_ns{0};
    std::atomic<uint8_t> state{0};
    std::array<std::atomic<uint64_t>, 4> name{};
  };
  // Consistent copy of slot i (by ring position); false if it was overwritten meanwhile.
  bool read(uint64_t index, FlightEntry* out, bool with_name = true) const;

  std::array<Slot, kDepth> slots_;
  std::atomic<uint64_t> head_{0};  // calls begun; the open call is head_ - 1
  std::atomic<int> waiting_on_{-1};
  std::atomic<uint32_t> failures_{0};
  std::atomic<RankPhase> phase_{RankPhase::kIdle};
};

}  // namespace dtsim
