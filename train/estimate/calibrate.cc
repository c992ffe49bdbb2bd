#include "train/estimate/calibrate.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <thread>
#include <vector>

#include "runtime/communicator.h"
#include "runtime/world.h"
#include "train/config.h"
#include "train/estimate/architecture.h"
#include "train/estimate/projection.h"
#include "train/strategies.h"

namespace dtsim::train::estimator {
namespace {

// Median seconds of one all_reduce (the algorithm dtsim train runs: Algo::kAuto) of `floats` floats
// on 2 rank threads, over `iters` calls per trial, 5 trials.
double all_reduce_seconds(size_t floats, int iters) {
  World world(2);
  std::vector<double> trials;
  world.run([&](Communicator& comm) {
    std::vector<float> buf(floats, 1.0f);
    comm.all_reduce(std::span<float>(buf), ReduceOp::kSum, Algo::kAuto);  // warm-up
    for (int t = 0; t < 5; ++t) {
      comm.barrier();
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) {
        comm.all_reduce(std::span<float>(buf), ReduceOp::kSum, Algo::kAuto);
      }
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iters;
      if (comm.rank() == 0) trials.push_back(s);
    }
  });
  std::sort(trials.begin(), trials.end());
  return trials[trials.size() / 2];
}

// The calibration shapes: single-rank runs of shapes bench/estimate_vs_train.py does not
// hold out (keep them disjoint).
std::vector<std::pair<std::string, TrainConfig>> calibration_configs() {
  std::vector<std::pair<std::string, TrainConfig>> out;
  auto mlp = [&](int d, int h, int l, int b) {
    TrainConfig t;
    t.mlp = {.input_dim = d, .hidden_dim = h, .num_blocks = l, .output_dim = 4};
    t.global_batch = b;
    out.emplace_back(fmt::format("mlp D{} H{} L{} B{}", d, h, l, b), t);
  };
  mlp(192, 768, 2, 256);
  mlp(96, 384, 3, 512);
  mlp(320, 640, 1, 128);
  mlp(64, 256, 6, 256);
  mlp(384, 1536, 1, 64);
  auto moe = [&](int d, int f, int e, int l, int b) {
    TrainConfig t;
    t.model = ModelKind::kMoe;
    t.moe.input_dim = d, t.moe.moe.d_model = d, t.moe.moe.d_ff = f, t.moe.moe.num_experts = e;
    t.moe.num_blocks = l;
    t.global_batch = b;
    out.emplace_back(fmt::format("moe D{} H{} E{} L{} B{}", d, f, e, l, b), t);
  };
  moe(96, 384, 4, 1, 256);
  moe(64, 256, 8, 2, 384);
  auto gpt = [&](int d, int heads, int f, int l, int s, int b) {
    TrainConfig t;
    t.model = ModelKind::kGpt;
    t.gpt = {.vocab = 32,
             .seq_len = s,
             .d_model = d,
             .heads = heads,
             .head_dim = d / heads,
             .num_layers = l,
             .mlp_hidden = f};
    t.global_batch = b;
    out.emplace_back(fmt::format("gpt D{} heads {} H{} L{} S{} B{}", d, heads, f, l, s, b), t);
  };
  gpt(48, 4, 192, 2, 24, 32);
  gpt(96, 4, 384, 1, 16, 16);
  for (auto& [name, t] : out) t.strategy = Strategy::kSingle, t.ranks = 1, t.steps = 7;
  return out;
}

Architecture architecture(const TrainConfig& t) {
  Architecture a;
  a.kind = t.model == ModelKind::kMlp   ? ArchKind::kMlp
           : t.model == ModelKind::kMoe ? ArchKind::kMoe
                                        : ArchKind::kGpt;
  a.mlp = t.mlp;
  a.moe = t.moe;
  a.gpt = {.layers = t.gpt.num_layers,
           .hidden = t.gpt.d_model,
           .heads = t.gpt.heads,
           .ffn = t.gpt.mlp_hidden,
           .vocab = t.gpt.vocab,
           .seq = t.gpt.seq_len};
  return a;
}

// Least squares of rows x . c = 1 (each run's features over its seconds: relative error)
// with c >= 0: drop the most negative coefficient and solve again.
std::array<double, 5> fit(const std::vector<std::array<double, 5>>& rows) {
  std::array<bool, 5> on{true, true, true, true, true};
  for (;;) {
    std::array<std::array<double, 6>, 5> m{};  // normal equations, augmented
    for (const auto& r : rows) {
      for (int i = 0; i < 5; ++i) {
        for (int j = 0; j < 5; ++j) m[i][j] += on[i] && on[j] ? r[i] * r[j] : 0;
        m[i][5] += on[i] ? r[i] : 0;
      }
    }
    for (int i = 0; i < 5; ++i) {
      if (!on[i]) m[i][i] = 1;
    }
    for (int i = 0; i < 5; ++i) {  // Gauss-Jordan, partial pivoting
      int piv = i;
      for (int k = i + 1; k < 5; ++k) {
        if (std::abs(m[k][i]) > std::abs(m[piv][i])) piv = k;
      }
      std::swap(m[i], m[piv]);
      if (std::abs(m[i][i]) < 1e-300) continue;
      for (int k = 0; k < 5; ++k) {
        if (k == i) continue;
        const double f = m[k][i] / m[i][i];
        for (int j = i; j < 6; ++j) m[k][j] -= f * m[i][j];
      }
    }
    std::array<double, 5> c{};
    int worst = -1;
    for (int i = 0; i < 5; ++i) {
      c[i] = on[i] && std::abs(m[i][i]) > 1e-300 ? m[i][5] / m[i][i] : 0;
      if (c[i] < 0 && (worst < 0 || c[i] < c[worst])) worst = i;
    }
    if (worst < 0) return c;
    on[worst] = false;
  }
}

constexpr int kTrials = 5;

// The slowest median step of `n` copies of single-rank run `t` at once (each its own thread
// and World, as n rank threads share the cores; their IntraOpLimits leave one core each).
double concurrent_seconds(const TrainConfig& t, int n) {
  std::vector<double> s(n);
  {
    std::vector<std::jthread> runs;
    for (int i = 0; i < n; ++i) {
      runs.emplace_back([&, i] {
        TrainConfig c = t;
        c.ranks = 1;
        s[i] = run_training(c).seconds_per_step;
      });
    }
  }
  return *std::max_element(s.begin(), s.end());
}

}  // namespace

Calibration calibrate() {
  Calibration c;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::array<double, 5>> rows;
  std::vector<double> slowdowns;
  for (auto& [name, t] : calibration_configs()) {
    const Architecture a = architecture(t);
    CalibrationRun r;
    r.name = name;
    r.flops =
        3 * forward_flops(a, double(t.global_batch) * (a.kind == ArchKind::kGpt ? a.gpt.seq : 1))
                .total();
    r.elements = forward_elements(a, t.global_batch, 1, 1);
    r.layers = layer_count(a);
    r.params = count_params(a).total();
    r.seconds = r.concurrent = 1e30;
    for (int trial = 0; trial < kTrials; ++trial) {  // the least disturbed of a few, interleaved
      r.seconds = std::min(r.seconds, run_training(t).seconds_per_step);
      r.concurrent = std::min(r.concurrent, concurrent_seconds(t, cores));
    }
    slowdowns.push_back(r.concurrent / r.seconds);
    rows.push_back({r.flops / r.seconds, r.elements / r.seconds, r.layers / r.seconds,
                    r.params / r.seconds, 1 / r.seconds});
    c.runs.push_back(r);
  }
  const std::array<double, 5> k = fit(rows);
  std::sort(slowdowns.begin(), slowdowns.end());

  Hardware& hw = c.hw;
  hw.name = "calibrated";
  hw.source = "dtsim estimate --calibrate on this machine";
  hw.peak_flops = k[0] > 0 ? 1 / k[0] : 1e30;  // one rank's GEMM rate on every core
  hw.efficiency = 1;
  hw.element_seconds = k[1], hw.layer_seconds = k[2], hw.param_seconds = k[3];
  hw.step_seconds = k[4];
  hw.shared_slowdown = slowdowns[slowdowns.size() / 2];
  for (CalibrationRun& r : c.runs) {
    r.fitted = r.flops * k[0] + r.elements * k[1] + r.layers * k[2] + r.params * k[3] + k[4];
  }

  c.small_seconds = all_reduce_seconds(1, 2000);
  const size_t large = size_t{4} << 20;  // floats: 16 MiB
  c.large_seconds = all_reduce_seconds(large, 5);
  c.large_bytes = large * sizeof(float);
  hw.devices_per_node = World::kMaxRanks;  // one machine: every group is "intra"
  // Priced as a ring on 2 ranks (the projection's all_reduce): 2 alpha + 2 (1/2) n beta.
  hw.intra.latency = c.small_seconds / 2;
  const double beta = std::max(1e-15, (c.large_seconds - c.small_seconds) / c.large_bytes);
  hw.intra.bandwidth = 1 / beta;
  hw.inter = hw.intra;
  hw.memory_bytes = 0;
  hw.cores = cores;
  return c;
}

}  // namespace dtsim::train::estimator
