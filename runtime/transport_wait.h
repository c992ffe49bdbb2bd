// Small pieces the in-process transport's waits share (thread_transport.cc, lend.cc).
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

#include "runtime/flight_recorder.h"

namespace dtsim {

using Clock = std::chrono::steady_clock;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
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
