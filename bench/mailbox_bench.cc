// Mailbox suite: point-to-point cost of the in-process transport, and its yardstick.
//
// - handoff/pin:P: two plain threads bounce one cache line (a std::atomic counter) back
//   and forth; time = one-way handoff = round trip / 2. The floor any mailbox pays.
// - pingpong/bytes:B/pin:P: rank 0 sends B bytes to rank 1 through Communicator::send, rank
//   1 receives and sends them back; time = one-way latency = round trip / 2.
// - stream/bytes:B/pin:P: rank 0 sends back-to-back messages, rank 1 receives them; time
//   per message; bw_GBps = B / time.
// pin:1 pins the two threads to CPUs 0 and 1 (cross-core for sure); pin:0 leaves placement
// to the scheduler. Time is measured inside one World::run (never its wake-up).
#include <benchmark/benchmark.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <span>
#include <thread>
#include <vector>

#include "runtime/communicator.h"
#include "runtime/world.h"

namespace dtsim::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Pins the calling thread to `cpu`, or back to every CPU when cpu < 0.
void pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  const int n = static_cast<int>(std::thread::hardware_concurrency());
  for (int c = 0; c < n; ++c) {
    if (cpu < 0 || c == cpu % n) CPU_SET(c, &set);
  }
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

World& world2() {
  static World w(2);
  return w;
}

void bm_handoff(benchmark::State& state) {
  const bool pin = state.range(0) != 0;
  const int64_t trips = std::max<int64_t>(1, state.max_iterations);
  alignas(64) std::atomic<uint64_t> line{0};
  std::thread echo([&] {
    if (pin) pin_to(1);
    for (uint64_t i = 0; i < static_cast<uint64_t>(trips); ++i) {
      while (line.load(std::memory_order_acquire) != 2 * i + 1) {
      }
      line.store(2 * i + 2, std::memory_order_release);
    }
  });
  if (pin) pin_to(0);
  const auto t0 = Clock::now();
  for (uint64_t i = 0; i < static_cast<uint64_t>(trips); ++i) {
    line.store(2 * i + 1, std::memory_order_release);
    while (line.load(std::memory_order_acquire) != 2 * i + 2) {
    }
  }
  const auto t1 = Clock::now();
  if (pin) pin_to(-1);
  echo.join();
  const double one_way = seconds(t0, t1) / (2.0 * static_cast<double>(trips));
  for (auto _ : state) state.SetIterationTime(one_way);
}

void bm_pingpong(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  const bool pin = state.range(1) != 0;
  const int64_t trips = std::max<int64_t>(1, state.max_iterations);
  double elapsed = 0;
  bool ok = true;
  world2().run([&](Communicator& comm) {
    const int r = comm.rank();
    if (pin) pin_to(r);
    std::vector<std::byte> buf(bytes, std::byte{static_cast<unsigned char>(r + 1)});
    std::span<std::byte> s(buf);
    // Verify once: rank 1 must see rank 0's bytes, and rank 0 get them back.
    if (r == 0) {
      comm.send(std::span<const std::byte>(s), 1);
      std::fill(buf.begin(), buf.end(), std::byte{0});
      comm.recv(s, 1);
      for (std::byte b : buf) ok = ok && b == std::byte{1};
    } else {
      comm.recv(s, 0);
      comm.send(std::span<const std::byte>(s), 0);
    }
    comm.barrier();
    const auto t0 = Clock::now();
    for (int64_t i = 0; i < trips; ++i) {
      if (r == 0) {
        comm.send(std::span<const std::byte>(s), 1);
        comm.recv(s, 1);
      } else {
        comm.recv(s, 0);
        comm.send(std::span<const std::byte>(s), 0);
      }
    }
    if (r == 0) elapsed = seconds(t0, Clock::now());
    if (pin) pin_to(-1);
  });
  if (!ok) {
    state.SkipWithError("ping-pong payload arrived corrupted");
    return;
  }
  const double one_way = elapsed / (2.0 * static_cast<double>(trips));
  for (auto _ : state) state.SetIterationTime(one_way);
  state.counters["bw_GBps"] = static_cast<double>(bytes) / one_way / 1e9;
}

void bm_stream(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  const bool pin = state.range(1) != 0;
  const int64_t msgs = std::max<int64_t>(1, state.max_iterations);
  double elapsed = 0;
  world2().run([&](Communicator& comm) {
    const int r = comm.rank();
    if (pin) pin_to(r);
    std::vector<std::byte> buf(bytes, std::byte{7});
    comm.barrier();
    const auto t0 = Clock::now();
    if (r == 0) {
      for (int64_t i = 0; i < msgs; ++i) comm.send(std::span<const std::byte>(buf), 1);
      comm.recv(std::span<std::byte>(buf.data(), 0), 1);  // rank 1 has them all
      elapsed = seconds(t0, Clock::now());
    } else {
      for (int64_t i = 0; i < msgs; ++i) comm.recv(std::span<std::byte>(buf), 0);
      comm.send(std::span<const std::byte>(buf.data(), 0), 0);
    }
    if (pin) pin_to(-1);
  });
  const double per = elapsed / static_cast<double>(msgs);
  for (auto _ : state) state.SetIterationTime(per);
  state.counters["bw_GBps"] = static_cast<double>(bytes) / per / 1e9;
}

void register_all() {
  benchmark::RegisterBenchmark("handoff", bm_handoff)
      ->ArgName("pin")
      ->DenseRange(0, 1)
      ->UseManualTime()
      ->Unit(benchmark::kNanosecond);
  using Fn = void (*)(benchmark::State&);
  const std::pair<const char*, Fn> suites[] = {{"pingpong", bm_pingpong}, {"stream", bm_stream}};
  for (auto [name, fn] : suites) {
    auto* b = benchmark::RegisterBenchmark(name, fn);
    b->ArgNames({"bytes", "pin"});
    for (int pin : {0, 1}) {
      for (int64_t s = 8; s < (1 << 20); s *= 4) b->Args({s, pin});
      b->Args({1 << 20, pin});
    }
    b->UseManualTime()->Unit(benchmark::kNanosecond);
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
