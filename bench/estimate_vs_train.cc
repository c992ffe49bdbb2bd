// Predicted against measured step time: calibrates this machine (train/estimate/calibrate.h,
// what `dtsim estimate --calibrate` writes), then for a fixed set of held-out `dtsim train`
// runs (shapes, strategies and rank counts the calibration did not use) prints the
// projection's step time beside the measured median step, and the median and worst error.
//
//   build/bench/estimate_vs_train [--steps N]
//
// Speed is measured here, never asserted: the numbers go to docs/estimate.md beside this
// command. The machine's other load moves them; run it on a quiet machine.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "train/config.h"
#include "train/estimate/calibrate.h"
#include "train/estimate/projection.h"
#include "train/strategies.h"

namespace est = dtsim::train::estimator;
using dtsim::train::ModelKind;
using dtsim::train::Strategy;
using dtsim::train::TrainConfig;

namespace {

struct Run {
  const char* name;
  TrainConfig config;
};

TrainConfig mlp(Strategy s, int ranks, int dim, int hidden, int layers, int batch) {
  TrainConfig c;
  c.strategy = s;
  c.ranks = ranks;
  c.global_batch = batch;
  c.mlp = {.input_dim = dim, .hidden_dim = hidden, .num_blocks = layers, .output_dim = 4};
  if (s == Strategy::kTp) c.tp_size = ranks;
  return c;
}

TrainConfig moe(Strategy s, int ranks, int dim, int ffn, int experts, int batch) {
  TrainConfig c;
  c.strategy = s;
  c.model = ModelKind::kMoe;
  c.ranks = ranks;
  c.global_batch = batch;
  c.moe.input_dim = dim;
  c.moe.num_classes = 4;
  c.moe.moe = {.d_model = dim, .d_ff = ffn, .num_experts = experts, .top_k = 2};
  return c;
}

std::vector<Run> held_out() {
  std::vector<Run> runs = {
      {"mlp single D128 H512 L4 B256", mlp(Strategy::kSingle, 1, 128, 512, 4, 256)},
      {"mlp single D256 H1024 L2 B128", mlp(Strategy::kSingle, 1, 256, 1024, 2, 128)},
      {"mlp ddp 2 D256 H1024 L2 B256", mlp(Strategy::kDdp, 2, 256, 1024, 2, 256)},
      {"mlp ddp 4 D128 H512 L4 B256", mlp(Strategy::kDdp, 4, 128, 512, 4, 256)},
      {"mlp ddp 8 D128 H512 L2 B512", mlp(Strategy::kDdp, 8, 128, 512, 2, 512)},
      {"mlp zero1 4 D256 H1024 L2 B256", mlp(Strategy::kZero1, 4, 256, 1024, 2, 256)},
      {"mlp zero3 2 D256 H1024 L2 B256", mlp(Strategy::kZero3, 2, 256, 1024, 2, 256)},
      {"mlp tp 2 D256 H1024 L2 B256", mlp(Strategy::kTp, 2, 256, 1024, 2, 256)},
      {"mlp tp 4 D128 H1024 L4 B128", mlp(Strategy::kTp, 4, 128, 1024, 4, 128)},
      {"mlp ddp 3 D192 H384 L3 B384", mlp(Strategy::kDdp, 3, 192, 384, 3, 384)},
      {"moe single D128 F512 E4 B256", moe(Strategy::kSingle, 1, 128, 512, 4, 256)},
      {"moe ddp 2 D128 F512 E4 B256", moe(Strategy::kDdp, 2, 128, 512, 4, 256)},
      {"moe ep 4 D128 F256 E8 B512", moe(Strategy::kEp, 4, 128, 256, 8, 512)},
      {"moe ddp 4 D64 F512 E4 B256", moe(Strategy::kDdp, 4, 64, 512, 4, 256)},
  };
  return runs;
}

est::ProjectionInput projection_of(const TrainConfig& c, const est::Hardware& hw) {
  est::ProjectionInput in;
  in.arch.kind = c.model == ModelKind::kMlp ? est::ArchKind::kMlp : est::ArchKind::kMoe;
  in.arch.mlp = c.mlp;
  in.arch.moe = c.moe;
  const dtsim::train::MeshShape m = c.mesh();
  in.dp = m.dp, in.tp = m.tp, in.pp = m.pp, in.ep = m.ep;
  in.zero = c.strategy == Strategy::kZero1   ? 1
            : c.strategy == Strategy::kZero2 ? 2
            : c.strategy == Strategy::kZero3 ? 3
                                             : c.zero;
  in.micro_batch = c.global_batch / (m.dp * c.micro_batches);
  in.global_batch = c.global_batch;
  in.precision = c.precision;
  in.optimizer = c.optimizer;
  in.hw = hw;
  return in;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 8;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--steps") == 0 && i + 1 < argc) {
      steps = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: estimate_vs_train [--steps N]\n");
      return 2;
    }
  }
  if (steps < 2) {
    std::fprintf(stderr, "estimate_vs_train: --steps must be at least 2 (the first is dropped)\n");
    return 2;
  }
  const est::Calibration cal = est::calibrate();
  std::printf(
      "calibration: %.4g GFLOP/s per core x %d cores (mlp D192 H768 L2 B256 single), "
      "alpha %.3g us, beta 1/(%.4g GB/s)\n\n",
      cal.hw.peak_flops / 1e9, cal.hw.cores, cal.hw.intra.latency * 1e6,
      cal.hw.intra.bandwidth / 1e9);
  std::printf("%-34s %12s %12s %8s\n", "held-out run", "predicted", "measured", "error");
  std::vector<double> errors;
  for (Run& r : held_out()) {
    r.config.steps = steps;
    const est::ProjectionInput in = projection_of(r.config, cal.hw);
    if (const std::string why = est::validate(in); !why.empty()) {
      std::fprintf(stderr, "%s: %s\n", r.name, why.c_str());
      return 1;
    }
    const double predicted = est::project(in).step;
    const double measured = dtsim::train::run_training(r.config).seconds_per_step;
    const double err = predicted / measured - 1;
    errors.push_back(std::abs(err));
    std::printf("%-34s %9.3f ms %9.3f ms %+7.1f%%\n", r.name, predicted * 1e3, measured * 1e3,
                100 * err);
    std::fflush(stdout);
  }
  std::vector<double> sorted = errors;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted.size() % 2
                            ? sorted[sorted.size() / 2]
                            : (sorted[sorted.size() / 2 - 1] + sorted[sorted.size() / 2]) / 2;
  std::printf("\n%zu runs: median |error| %.1f%%, worst %.1f%%\n", errors.size(), 100 * median,
              100 * sorted.back());
  return 0;
}
