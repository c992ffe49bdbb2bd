// Small pieces the in-process transport's waits share (thread_transport.cc, lend.cc).
#pragma once

#include <sched.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "runtime/diagnostics/flight_recorder.h"

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
// core (more ranks than free cores, or other processes) a yield lets it run, and a futex
// sleep would cost a wake-up of tens of microseconds on every message.
template <class Ready>
bool yield_poll(Ready&& ready) {
  const auto until = Clock::now() + std::chrono::microseconds(50);
  for (int i = 0;; ++i) {
    if (ready()) return true;
    if (i >= 4 && Clock::now() >= until) return false;
    sched_yield();
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
