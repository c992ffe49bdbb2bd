// Collectives suite: every collective x algorithm x N in {2, 4, 8} x sizes 8 B .. 64 MiB
// (x4 steps, plus 64 MiB), float32 sum. Reports manual (wall-clock) time per call and the
// nccl-tests counters algbw and busbw in GB/s (1e9 B/s), and a memcpy baseline at the
// same sizes. Every case is verified once before it is timed; a wrong result fails the
// benchmark with the number of wrong elements.
//
// One Google Benchmark run = one World::run: the ranks verify, warm up, meet at a barrier,
// and each runs state.max_iterations calls; the time is from the first rank leaving the
// barrier to the last rank finishing (collective_harness.h).
#include <benchmark/benchmark.h>

#include <set>
#include <string>
#include <tuple>

#include "bench/collective_harness.h"

namespace dtsim::bench {
namespace {

constexpr size_t kMinBytes = 8;
constexpr size_t kMaxBytes = size_t{64} << 20;

CollectiveHarness& harness() {
  static CollectiveHarness h;
  return h;
}

std::vector<size_t> sweep_sizes() {
  std::vector<size_t> v;
  for (size_t b = kMinBytes; b < kMaxBytes; b *= 4) v.push_back(b);
  v.push_back(kMaxBytes);
  return v;
}

// Plain values (not Google Benchmark rates, whose divisor is not the manual time).
void set_counters(benchmark::State& state, double bytes, double factor, double seconds) {
  state.counters["algbw_GBps"] = bytes / seconds / 1e9;
  state.counters["busbw_GBps"] = bytes * factor / seconds / 1e9;
  state.counters["bytes"] = bytes;
}

void bm_collective(benchmark::State& state, Coll coll, Algo algo) {
  CollCase c;
  c.coll = coll;
  c.algo = algo;
  c.ranks = static_cast<int>(state.range(0));
  c.bytes = static_cast<size_t>(state.range(1));
  // Verify a case once per process, not once per Google Benchmark calibration round.
  static std::set<std::tuple<int, int, int, size_t>> verified;
  const auto key = std::make_tuple(int(coll), int(algo), c.ranks, c.bytes);
  const bool verify = verified.insert(key).second;
  const int64_t iters = std::max<int64_t>(1, state.max_iterations);
  const CollResult r = harness().run(c, iters, 1, verify);
  if (r.wrong != 0) {
    state.SkipWithError(("#wrong = " + std::to_string(r.wrong)).c_str());
    return;
  }
  for (auto _ : state) state.SetIterationTime(r.seconds_per_call[0]);
  set_counters(state, static_cast<double>(c.size_bytes()), bus_factor(coll, c.ranks),
               r.seconds_per_call[0]);
}

void bm_memcpy(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  const double s = memcpy_seconds(bytes, 5);
  for (auto _ : state) state.SetIterationTime(s);
  set_counters(state, static_cast<double>(bytes), 1.0, s);
}

void register_all() {
  const std::vector<size_t> sizes = sweep_sizes();
  auto* m = benchmark::RegisterBenchmark("memcpy", bm_memcpy);
  for (size_t b : sizes) m->Arg(static_cast<int64_t>(b));
  m->UseManualTime()->Unit(benchmark::kMicrosecond);
  // N outermost; the harness makes one world per (N, collective, algorithm).
  for (int n : {2, 4, 8}) {
    for (Coll coll : kAllColls) {
      for (Algo algo : algos_of(coll)) {
        const std::string name = std::string(coll_name(coll)) + "/" + to_string(algo);
        auto* b = benchmark::RegisterBenchmark(name.c_str(), bm_collective, coll, algo);
        b->ArgNames({"N", "bytes"});
        for (size_t s : sizes) b->Args({n, static_cast<int64_t>(s)});
        b->UseManualTime()->Unit(benchmark::kMicrosecond);
      }
    }
  }
}

}  // namespace
}  // namespace dtsim::bench

int main(int argc, char** argv) {
  dtsim::bench::register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
