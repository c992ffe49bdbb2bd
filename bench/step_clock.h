// The clocks and the median of the one-core step benches (mlp_step.cc, step_phases.cc).
// Thread safety: pure functions.
#pragma once

#include <algorithm>
#include <ctime>
#include <vector>

namespace dtsim::bench {

// Seconds on `clock`: CLOCK_THREAD_CPUTIME_ID for what a step costs this thread (on a
// shared machine it stays put while wall time grows), CLOCK_MONOTONIC for wall time.
inline double seconds(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace dtsim::bench
