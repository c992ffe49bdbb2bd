// Small pieces the in-process transport's waits share (thread_transport.cc, lend.cc).
#pragma once

#include <sched.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include "runtime/diagnostics/flight_recorder.h"
#include "runtime/fast_clock.h"
#include "runtime/transport/yield_gate.h"

namespace dtsim {

using Clock = std::chrono::steady_clock;

// now + timeout, saturating: a timeout of milliseconds::max() means "never", not an
// overflow into the past.
inline Clock::time_point deadline_after(Clock::time_point now, std::chrono::milliseconds timeout) {
  if (timeout <= std::chrono::milliseconds::zero()) return now;
  const auto room = Clock::time_point::max() - now;
  if (std::chrono::duration_cast<std::chrono::milliseconds>(room) <= timeout) {
    return Clock::time_point::max();
  }
  return now + std::chrono::duration_cast<Clock::duration>(timeout);
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// The first two stages of every wait in the transport, before it sleeps on its doorbell.
// Busy polls, with a pause between: for a peer running on another core.
template <class Ready>
bool spin_poll(int spins, Ready&& ready) {
  for (int i = 0; i < spins; ++i) {
    if (ready()) return true;
    cpu_relax();
  }
  return false;
}

// Polls between sched_yield()s for at least 4 yields and 50 us: when the peer shares this
// core (more ranks than free cores) a yield lets it run, and a futex sleep would cost a
// wake-up of tens of microseconds on every message. Returns false at once (after one
// look) while `gate` is closed, and after a slow yield, which it charges to the gate:
// then another process likely holds the core, and the caller's doorbell sleep is woken
// by the ring where another yield would wait out its slice (yield_gate.h).
template <class Ready>
bool yield_poll(Ready&& ready, YieldGate& gate = YieldGate::process()) {
  int64_t now = FastClock::now_ns();
  if (!gate.open(now)) return ready();
  const int64_t until = now + 50'000;
  for (int i = 0;; ++i) {
    if (ready()) return true;
    if (i >= 4 && now >= until) return false;
    sched_yield();
    const int64_t after = FastClock::now_ns();
    if (!gate.note(now, after)) return ready();
    now = after;
  }
}

// Publishes, for the watchdog's desync report, whom a blocked rank waits for.
class WaitingOn {
 public:
  WaitingOn(FlightRecorder& me, int peer) : me_(me) { me_.set_waiting_on(peer); }
  ~WaitingOn() { me_.set_waiting_on(-1); }
  WaitingOn(const WaitingOn&) = delete;
  WaitingOn& operator=(const WaitingOn&) = delete;

 private:
  FlightRecorder& me_;
};

// "1.5 s", for error messages.
inline std::string seconds_text(std::chrono::milliseconds ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", ms.count() / 1000.0);
  return buf;
}

}  // namespace dtsim
