#include "train/estimate/calibrate.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "runtime/communicator.h"
#include "runtime/world.h"
#include "train/config.h"
#include "train/estimate/architecture.h"
#include "train/strategies.h"

namespace dtsim::train::estimator {
namespace {

// Median seconds of one ring all_reduce of `floats` floats on 2 rank threads, over `iters`
// calls per trial, 5 trials.
double all_reduce_seconds(size_t floats, int iters) {
  World world(2);
  std::vector<double> trials;
  world.run([&](Communicator& comm) {
    std::vector<float> buf(floats, 1.0f);
    comm.all_reduce(std::span<float>(buf), ReduceOp::kSum, Algo::kRing);  // warm-up
    for (int t = 0; t < 5; ++t) {
      comm.barrier();
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) {
        comm.all_reduce(std::span<float>(buf), ReduceOp::kSum, Algo::kRing);
      }
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iters;
      if (comm.rank() == 0) trials.push_back(s);
    }
  });
  std::sort(trials.begin(), trials.end());
  return trials[trials.size() / 2];
}

}  // namespace

Calibration calibrate() {
  Calibration c;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // Compute: dtsim train --strategy single on a calibration MLP (a shape the prediction
  // command's held-out runs do not use).
  TrainConfig t;
  t.strategy = Strategy::kSingle;
  t.ranks = 1;
  t.steps = 8;
  t.global_batch = 256;
  t.mlp = {.input_dim = 192, .hidden_dim = 768, .num_blocks = 2, .output_dim = 4};
  Architecture a;
  a.kind = ArchKind::kMlp;
  a.mlp = t.mlp;
  c.step_flops = 3 * forward_flops(a, t.global_batch).total();
  c.step_seconds = run_training(t).seconds_per_step;

  c.small_seconds = all_reduce_seconds(1, 2000);
  const size_t large = size_t{4} << 20;  // floats: 16 MiB
  c.large_seconds = all_reduce_seconds(large, 5);
  c.large_bytes = large * sizeof(float);

  Hardware& hw = c.hw;
  hw.name = "calibrated";
  hw.source = "dtsim estimate --calibrate on this machine";
  hw.peak_flops = c.step_flops / c.step_seconds;  // one rank thread's rate
  hw.efficiency = 1;
  hw.devices_per_node = World::kMaxRanks;  // one machine: every group is "intra"
  // Ring all_reduce on 2 ranks: 2 alpha + 2 (1/2) n beta.
  hw.intra.latency = c.small_seconds / 2;
  const double beta = std::max(1e-15, (c.large_seconds - c.small_seconds) / c.large_bytes);
  hw.intra.bandwidth = 1 / beta;
  hw.inter = hw.intra;
  hw.memory_bytes = 0;
  hw.cores = cores;
  return c;
}

}  // namespace dtsim::train::estimator
