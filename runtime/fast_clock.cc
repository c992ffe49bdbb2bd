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
  // Each sample brackets one rdtsc between two clock reads; a preemption between them
  // shows as a wide bracket, and the sample is taken again.
  auto sample = [](int64_t* ns, uint64_t* tsc) {
    for (int tries = 0; tries < 100; ++tries) {
      const int64_t before = steady_ns();
      *tsc = read_tsc();
      const int64_t after = steady_ns();
      *ns = before + (after - before) / 2;
      if (after - before < 20000) return true;
    }
    return false;
  };
  int64_t ns0 = 0, ns1 = 0;
  uint64_t tsc0 = 0, tsc1 = 0;
  if (!sample(&ns0, &tsc0)) return c;
  while (steady_ns() - ns0 < 2000000) {
  }
  if (!sample(&ns1, &tsc1) || tsc1 <= tsc0 || ns1 <= ns0) return c;
  c.ns_per_tick = static_cast<double>(ns1 - ns0) / static_cast<double>(tsc1 - tsc0);
  // A rate far from any real TSC (0.1 to 10 GHz) means the samples are not to be trusted.
  if (c.ns_per_tick < 0.1 || c.ns_per_tick > 10.0) return c;
  c.base_tsc = tsc1;
  c.base_ns = ns1;
  c.ok = true;
#endif
  return c;
}

}  // namespace dtsim
