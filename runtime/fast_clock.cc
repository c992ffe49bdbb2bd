#include "runtime/fast_clock.h"

#include <fstream>
#include <string>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace dtsim {

uint64_t FastClock::read_tsc() {
#if defined(__x86_64__)
  return __rdtsc();
#else
  return 0;
#endif
}

FastClock::Calibration FastClock::calibrate() {
  Calibration c;
#if defined(__x86_64__)
  // The kernel uses the TSC as its clock only when it found it invariant and in step on
  // every CPU; then so do we.
  std::ifstream f("/sys/devices/system/clocksource/clocksource0/current_clocksource");
  std::string source;
  if (!(f >> source) || source != "tsc") return c;
  // Two samples 2 ms apart give the rate to about 1e-5 (under a millisecond a minute).
  const int64_t ns0 = steady_ns();
  const uint64_t tsc0 = read_tsc();
  int64_t ns1 = ns0;
  while (ns1 - ns0 < 2000000) ns1 = steady_ns();
  const uint64_t tsc1 = read_tsc();
  if (tsc1 <= tsc0) return c;
  c.ns_per_tick = static_cast<double>(ns1 - ns0) / static_cast<double>(tsc1 - tsc0);
  c.base_tsc = tsc1;
  c.base_ns = ns1;
  c.ok = true;
#endif
  return c;
}

}  // namespace dtsim
