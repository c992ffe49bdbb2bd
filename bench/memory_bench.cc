// Memory suite: resident memory of the runtime with N idle ranks (N = 2, 8, 32, 64; the
// target is under 64 MiB at 64), read from /proc/self/status.
//
// Each case reads VmRSS before making a World of N ranks, then after one empty run (every
// rank thread started and parked), then after one 8-byte all_reduce (payload pools warm).
// Counters are MiB; delta_* subtract the reading before the World existed, so they are
// what N ranks cost. The time column is the World's construction plus the empty run.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <span>

#include "runtime/communicator.h"
#include "runtime/world.h"

namespace dtsim::bench {
namespace {

// A field of /proc/self/status ("VmRSS", "VmHWM") in MiB, or -1 if missing.
double status_mib(const char* field) {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  double kib = -1;
  const size_t len = std::strlen(field);
  while (std::fgets(line, sizeof line, f)) {
    if (std::strncmp(line, field, len) == 0 && line[len] == ':') {
      kib = std::atof(line + len + 1);
      break;
    }
  }
  std::fclose(f);
  return kib / 1024.0;
}

void bm_idle_ranks(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  double before = 0, idle = 0, warm = 0;
  for (auto _ : state) {
    before = status_mib("VmRSS");
    const auto t0 = std::chrono::steady_clock::now();
    World w(n);
    w.run([](Communicator&) {});
    state.SetIterationTime(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    idle = status_mib("VmRSS");
    bool ok = true;
    w.run([&](Communicator& comm) {
      float x = 1.0f;
      comm.all_reduce(std::span<float>(&x, 1));
      if (x != static_cast<float>(n)) ok = false;  // verify: the sum of n ones
    });
    if (!ok) state.SkipWithError("all_reduce of ones did not sum to N");
    warm = status_mib("VmRSS");
  }
  state.counters["rss_MiB"] = idle;
  state.counters["delta_idle_MiB"] = idle - before;
  state.counters["delta_warm_MiB"] = warm - before;
  state.counters["per_rank_KiB"] = (idle - before) * 1024.0 / n;
}

}  // namespace
}  // namespace dtsim::bench

BENCHMARK(dtsim::bench::bm_idle_ranks)
    ->ArgName("N")
    ->Arg(2)
    ->Arg(8)
    ->Arg(32)
    ->Arg(64)
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
