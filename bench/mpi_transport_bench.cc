// dtsim's all_reduce algorithms over the MPI transport against MPI's own MPI_Allreduce
// (Algo::kMpi), same job, same N and sizes, rounds interleaved; plus the 8-byte
// ping-pong latency over the MPI transport. Run under mpirun (one rank per process):
//   mpirun --allow-run-as-root --oversubscribe -np 4 build/bench/bench_mpi_transport
// Process 0 prints a markdown table: median time per call over the rounds, each time the
// slowest rank's (max over ranks by an all_reduce), and busbw (nccl-tests: 2(N-1)/N).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "runtime/communicator.h"
#include "runtime/world.h"

namespace {

using dtsim::Algo;
using dtsim::Communicator;
using Clock = std::chrono::steady_clock;

// Seconds per call of `calls` back-to-back all_reduces of `count` floats (slowest rank);
// verifies the first result (sum of rank + 1) before timing.
double time_all_reduce(dtsim::World& w, size_t count, Algo algo, int calls) {
  double worst = 0;
  w.run([&](Communicator& c) {
    std::vector<float> x(count, static_cast<float>(c.rank() + 1));
    c.all_reduce(std::span<float>(x), dtsim::ReduceOp::kSum, algo);
    const float want = static_cast<float>(c.size() * (c.size() + 1) / 2);
    for (float v : x) {
      if (v != want) throw dtsim::Error("bench: wrong all_reduce result");
    }
    for (int i = 0; i < 2; ++i) c.all_reduce(std::span<float>(x), dtsim::ReduceOp::kSum, algo);
    c.barrier();
    const auto t0 = Clock::now();
    for (int i = 0; i < calls; ++i) {
      c.all_reduce(std::span<float>(x), dtsim::ReduceOp::kSum, algo);
    }
    double s = std::chrono::duration<double>(Clock::now() - t0).count() / calls;
    c.all_reduce(std::span<double>(&s, 1), dtsim::ReduceOp::kMax, Algo::kDirect);
    if (c.rank() == 0) worst = s;
  });
  return worst;
}

// One-way latency of an 8-byte message between ranks 0 and 1 (half a round trip).
double ping_pong(dtsim::World& w, int rounds) {
  double one_way = 0;
  w.run([&](Communicator& c) {
    int64_t v = 0;
    if (c.rank() > 1) return;
    const int peer = 1 - c.rank();
    const auto t0 = Clock::now();
    for (int i = 0; i < rounds; ++i) {
      if (c.rank() == 0) {
        c.send(std::span<const int64_t>(&v, 1), peer);
        c.recv(std::span<int64_t>(&v, 1), peer);
      } else {
        c.recv(std::span<int64_t>(&v, 1), peer);
        c.send(std::span<const int64_t>(&v, 1), peer);
      }
    }
    if (c.rank() == 0) {
      one_way = std::chrono::duration<double>(Clock::now() - t0).count() / rounds / 2;
    }
  });
  return one_way;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main() {
  dtsim::World w(dtsim::ProcessModel::from_environment(1, 1));
  const int n = w.size();
  const bool lead = w.first_rank() == 0;
  const std::vector<size_t> bytes = {8, 1024, 64 << 10, 1 << 20, 4 << 20};
  const std::vector<Algo> algos = {Algo::kRing, Algo::kRecursiveDoubling, Algo::kTree, Algo::kMpi};
  constexpr int kRounds = 7;
  std::map<std::pair<size_t, Algo>, std::vector<double>> times;
  std::vector<double> pings;
  for (int round = 0; round < kRounds; ++round) {
    if (n >= 2) pings.push_back(ping_pong(w, 2000));
    for (size_t b : bytes) {
      const int calls = b <= 1024 ? 500 : b <= (64 << 10) ? 100 : 10;
      for (Algo a : algos) times[{b, a}].push_back(time_all_reduce(w, b / 4, a, calls));
    }
  }
  if (!lead) return 0;
  std::printf(
      "all_reduce (float32, sum), N=%d MPI processes x 1 rank thread; median of %d "
      "rounds; time per call in us (busbw GB/s)\n\n",
      n, kRounds);
  std::printf("| bytes |");
  for (Algo a : algos) std::printf(" %s |", dtsim::to_string(a));
  std::printf(" mpi / best dtsim |\n|---|");
  for (size_t i = 0; i <= algos.size(); ++i) std::printf("---|");
  std::printf("\n");
  for (size_t b : bytes) {
    std::printf("| %zu |", b);
    double best = 1e30;
    for (Algo a : algos) {
      const double t = median(times[{b, a}]);
      if (a != Algo::kMpi) best = std::min(best, t);
      const double busbw = n > 1 ? 2.0 * (n - 1) / n * b / t / 1e9 : 0;
      std::printf(" %.1f (%.2f) |", t * 1e6, busbw);
    }
    std::printf(" %.2f |\n", median(times[{b, Algo::kMpi}]) / best);
  }
  if (!pings.empty()) {
    std::printf(
        "\n8-byte one-way latency rank 0 <-> 1 over the MPI transport (send/recv "
        "ping-pong, median of %d rounds of 2000): %.1f us\n",
        kRounds, median(pings) * 1e6);
  }
  return 0;
}
