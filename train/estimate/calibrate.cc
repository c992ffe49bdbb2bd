#include "train/estimate/calibrate.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include <oneapi/tbb/global_control.h>

#include "runtime/communicator.h"
#include "runtime/world.h"
#include "train/config.h"
#include "train/estimate/architecture.h"
#include "train/estimate/projection.h"
#include "train/strategies.h"

namespace dtsim::train::estimator {
namespace {

// What a link is measured with: dtsim's own all_reduce in one shared buffer (Algo::kShared,
// what Algo::kAuto runs beyond kSmallAllReduce bytes), and the ring all_gather whose messages
// cross the transport's channels (as every other collective's do).
enum class Probe { kSharedAllReduce, kAllGather };

// Median seconds of one `probe` of `floats` floats (the all_gather's output) on `world`'s
// ranks, over `iters` calls per trial, 5 trials; under MPI every process gets global rank
// 0's median.
double probe_seconds(World& world, Probe probe, size_t floats, int iters) {
  double median = 0;
  world.run([&](Communicator& comm) {
    const size_t p = static_cast<size_t>(comm.size());
    std::vector<float> buf(std::max(floats, p), 1.0f);
    const size_t part = buf.size() / p;
    const std::vector<float> mine(part, 1.0f);  // the all_gather's input, made once
    auto once = [&] {
      if (probe == Probe::kSharedAllReduce) {
        comm.all_reduce(std::span<float>(buf), ReduceOp::kSum, Algo::kShared);
      } else {
        comm.all_gather(std::span<const float>(mine), std::span<float>(buf.data(), part * p),
                        Algo::kRing);
      }
    };
    once();  // warm-up
    std::vector<double> trials;
    for (int t = 0; t < 5; ++t) {
      comm.barrier();
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) once();
      trials.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iters);
    }
    std::sort(trials.begin(), trials.end());
    double m = trials[trials.size() / 2];
    comm.broadcast(std::span<double>(&m, 1), 0);
    if (comm.rank() == world.first_rank()) median = m;
  });
  return median;
}

// The links of `world` (2 or more ranks) into `c`: the transport's channels (intra and
// inter) from a ring all_gather, (p - 1) alpha + (p - 1) / p n beta, of 1 float a rank and of
// 4 MiB; the shared buffer from an all_reduce of 4 bytes and of 4 MiB, alpha + n beta.
void measure_links(World& world, Calibration& c) {
  const int n = world.size();
  const size_t large = size_t{1} << 20;  // floats: 4 MiB, a layer's gradients here
  c.link_ranks = n;
  c.large_bytes = large * sizeof(float);
  c.gather_small_seconds = probe_seconds(world, Probe::kAllGather, n, 2000);
  c.gather_large_seconds = probe_seconds(world, Probe::kAllGather, large, 50);
  c.hw.intra.latency = c.gather_small_seconds / (n - 1);
  c.hw.intra.bandwidth = (n - 1.0) / n * c.large_bytes /
                         std::max(1e-12, c.gather_large_seconds - c.gather_small_seconds);
  c.hw.inter = c.hw.intra;
  if (world.model().mpi) {  // no shared buffer across processes: the algorithms on the link
    c.hw.shared_latency = c.hw.shared_bandwidth = 0;
    return;
  }
  c.small_seconds = probe_seconds(world, Probe::kSharedAllReduce, 1, 2000);
  c.large_seconds = probe_seconds(world, Probe::kSharedAllReduce, large, 50);
  c.hw.shared_latency = c.small_seconds;
  c.hw.shared_bandwidth = c.large_bytes / std::max(1e-12, c.large_seconds - c.small_seconds);
}

// The calibration shapes: single-rank runs of shapes bench/estimate_vs_train.py does not
// hold out (keep them disjoint).
using CalibrationConfigs = std::vector<std::pair<std::string, TrainConfig>>;

CalibrationConfigs calibration_configs() {
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
  mlp(32, 128, 1, 32);  // mostly the step's fixed cost
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
  moe(32, 128, 4, 1, 64);
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
  gpt(16, 2, 64, 1, 8, 8);
  gpt(32, 2, 128, 1, 48, 8);  // long sequences: attention's s^2 work
  for (auto& [name, t] : out) t.strategy = Strategy::kSingle, t.ranks = 1, t.steps = 20;
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

// Least squares of rows x . c = 1 (each run's terms over its seconds: relative error) with
// c >= 0: drop the most negative coefficient and solve again.
template <size_t N>
std::array<double, N> fit(const std::vector<std::array<double, N>>& x) {
  std::array<bool, N> on;
  on.fill(true);
  for (;;) {
    std::array<std::array<double, N + 1>, N> m{};  // normal equations, augmented
    for (size_t r = 0; r < x.size(); ++r) {
      for (size_t i = 0; i < N; ++i) {
        for (size_t j = 0; j < N; ++j) m[i][j] += on[i] && on[j] ? x[r][i] * x[r][j] : 0;
        m[i][N] += on[i] ? x[r][i] : 0;
      }
    }
    for (size_t i = 0; i < N; ++i) {
      if (!on[i]) m[i][i] = 1;
    }
    for (size_t i = 0; i < N; ++i) {  // Gauss-Jordan, partial pivoting
      size_t piv = i;
      for (size_t k = i + 1; k < N; ++k) {
        if (std::abs(m[k][i]) > std::abs(m[piv][i])) piv = k;
      }
      std::swap(m[i], m[piv]);
      if (std::abs(m[i][i]) < 1e-300) continue;
      for (size_t k = 0; k < N; ++k) {
        if (k == i) continue;
        const double f = m[k][i] / m[i][i];
        for (size_t j = i; j <= N; ++j) m[k][j] -= f * m[i][j];
      }
    }
    std::array<double, N> c{};
    int worst = -1;
    for (size_t i = 0; i < N; ++i) {
      c[i] = on[i] && std::abs(m[i][i]) > 1e-300 ? m[i][N] / m[i][i] : 0;
      if (c[i] < 0 && (worst < 0 || c[i] < c[worst])) worst = static_cast<int>(i);
    }
    if (worst < 0) return c;
    on[worst] = false;
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

constexpr int kTrials = 5;

// Calibration shape `t`'s work: one step's FLOPs, activation elements and parameters.
CalibrationRun calibration_run(const std::string& name, const TrainConfig& t) {
  const Architecture a = architecture(t);
  CalibrationRun r;
  r.name = name;
  const double tokens = double(t.global_batch) * (a.kind == ArchKind::kGpt ? a.gpt.seq : 1);
  r.flops = 3 * forward_flops(a, tokens).total();
  r.elements = forward_elements(a, t.global_batch, 1, 1);
  r.params = count_params(a).total();
  return r;
}

// The fit's column of a model kind's element cost (element_seconds, moe_, gpt_).
int element_column(ArchKind kind) {
  return kind == ArchKind::kMlp ? 1 : kind == ArchKind::kMoe ? 2 : 3;
}

// The median step of single-rank run `t`, its kernels on one thread.
double one_core_seconds(const TrainConfig& t) {
  const tbb::global_control one(tbb::global_control::max_allowed_parallelism, 1);
  return run_training(t).seconds_per_step;
}

// The batch each of `n` ranks runs when `t` runs as ddp: t's batch split n ways, as a mesh
// splits its global batch (or all of it when it does not divide).
int rank_batch(const TrainConfig& t, int n) {
  return t.global_batch % n == 0 ? t.global_batch / n : t.global_batch;
}

// Shape `t` as `dtsim train --strategy ddp` on `n` ranks, each with rank_batch(t, n) samples.
TrainConfig ddp_config(const TrainConfig& t, int n) {
  TrainConfig ddp = t;
  ddp.strategy = Strategy::kDdp;
  ddp.ranks = n;
  ddp.global_batch = rank_batch(t, n) * n;
  return ddp;
}

// The median step of run `t` as `dtsim train --strategy ddp` on `n` rank threads, each with
// rank_batch(t, n) samples (n ranks of a mesh sharing the cores, as train/intra_op.h leaves
// them; fit_sharing separates the gradients' all_reduce).
double concurrent_seconds(const TrainConfig& t, int n) {
  return run_training(ddp_config(t, n)).seconds_per_step;
}

// One rank's one-core step when `n` ranks split calibration run `r` (shape `t`), by the
// compute terms of `hw` (the fit).
double fitted_seconds(const Hardware& hw, const CalibrationRun& r, const TrainConfig& t, int n) {
  const double e = element_seconds(hw, architecture(t).kind);
  const double share = double(rank_batch(t, n)) / t.global_batch;
  return (r.flops / hw.peak_flops + r.elements * e) * share + r.params * hw.param_seconds +
         hw.step_seconds;
}

// How `n` ranks share the cores, fitted (relative error) to ddp steps `measured` of the runs:
// a rank's step is its share's one-core time (fitted_seconds) times a slowdown, plus its
// gradients' all_reduce at a cost per byte (buffers out of cache, ranks arriving apart,
// time-sliced: what a training step pays, not a loop of all_reduces). {slowdown, seconds
// per byte}.
std::array<double, 2> fit_sharing(const Hardware& hw, const std::vector<CalibrationRun>& runs,
                                  const CalibrationConfigs& configs,
                                  const std::vector<double>& measured, int n) {
  std::vector<std::array<double, 2>> rows;
  for (size_t i = 0; i < runs.size(); ++i) {
    rows.push_back({fitted_seconds(hw, runs[i], configs[i].second, n) / measured[i],
                    runs[i].params * sizeof(float) / measured[i]});
  }
  return fit(rows);
}

// The sharing regime of `n` ranks on `cores` cores: 0 up to `cores` (Hardware's shared_),
// 1 up to 2 x `cores` (oversubscribed_), 2 beyond (crowded_).
int regime(int n, int cores) { return n <= cores ? 0 : n <= 2 * cores ? 1 : 2; }

// Sets regime `j`'s slowdown and all_reduce cost per byte in `hw` (fit_sharing's pair).
void set_sharing(Hardware& hw, int j, std::array<double, 2> s) {
  double* slowdown[3] = {&hw.shared_slowdown, &hw.oversubscribed_slowdown, &hw.crowded_slowdown};
  double* sync[3] = {&hw.shared_sync_seconds, &hw.oversubscribed_sync_seconds,
                     &hw.crowded_sync_seconds};
  *slowdown[j] = std::max(j == 0 ? 1.0 : *slowdown[j - 1], s[0]);
  *sync[j] = s[1];
}

// The first gpt calibration shape as context parallelism on 2 ranks (dtsim train --cp 2),
// its name.
std::pair<std::string, TrainConfig> context_parallel_config(const CalibrationConfigs& configs) {
  for (const auto& [name, t] : configs) {
    if (t.model != ModelKind::kGpt) continue;
    TrainConfig cp = t;
    cp.strategy = Strategy::kMesh;
    cp.widths = {.dp = 1, .tp = 1, .pp = 1, .ep = 1, .cp = 2};
    cp.ranks = 2;
    return {name + " cp x2", cp};
  }
  throw Error("calibration_configs has no gpt shape");
}

// The first moe calibration shape whose experts split `ranks` ways as expert parallelism on
// `ranks` ranks (dtsim train --strategy ep), its name; none when no shape's experts split.
std::optional<std::pair<std::string, TrainConfig>> expert_parallel_config(
    const CalibrationConfigs& configs, int ranks) {
  for (const auto& [name, t] : configs) {
    if (t.model != ModelKind::kMoe || t.moe.moe.num_experts % ranks != 0) continue;
    TrainConfig ep = t;
    ep.strategy = Strategy::kEp;
    ep.ranks = ranks;
    ep.global_batch = rank_batch(t, ranks) * ranks;
    return std::pair{fmt::format("{} ep x{}", name, ranks), ep};
  }
  return std::nullopt;
}

// The projection of calibration run `t` (a mesh of dp, ep, cp; fp32, sgd, no dropout) on `hw`.
Projection project_run(const TrainConfig& t, const Hardware& hw) {
  ProjectionInput in;
  in.arch = architecture(t);
  in.cp = t.strategy == Strategy::kMesh ? t.widths.cp : 1;
  in.dp = in.ep = t.strategy == Strategy::kEp ? t.ranks : 1;
  in.global_batch = t.global_batch;
  in.micro_batch = t.global_batch / in.dp;
  in.dropout = false;
  in.precision = model::Precision::kFp32;
  in.optimizer = model::OptimizerKind::kSgd;
  in.hw = hw;
  return project(in);
}

}  // namespace

Calibration calibrate() {
  Calibration c;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::array<double, 6>> rows;
  std::vector<double> speedups;
  const auto configs = calibration_configs();
  // trials[shape][kind of run]: the trials outermost, so a slow stretch of a shared machine
  // falls on one trial of every shape (which the median drops), not on a run of shapes.
  std::vector<std::array<std::vector<double>, 5>> trials(configs.size());
  const auto& [ring_name, ring] = context_parallel_config(configs);
  std::vector<double> ring_trials, expert_trials;
  const auto expert = expert_parallel_config(configs, 2 * cores);
  for (int trial = 0; trial < kTrials; ++trial) {
    ring_trials.push_back(run_training(ring).seconds_per_step);
    if (expert) expert_trials.push_back(run_training(expert->second).seconds_per_step);
    for (size_t i = 0; i < configs.size(); ++i) {
      const TrainConfig& t = configs[i].second;
      trials[i][0].push_back(one_core_seconds(t));
      trials[i][1].push_back(run_training(t).seconds_per_step);
      trials[i][2].push_back(concurrent_seconds(t, cores));
      trials[i][3].push_back(concurrent_seconds(t, 2 * cores));
      trials[i][4].push_back(concurrent_seconds(t, 4 * cores));
    }
  }
  for (size_t i = 0; i < configs.size(); ++i) {
    const auto& [name, t] = configs[i];
    const Architecture a = architecture(t);
    CalibrationRun r = calibration_run(name, t);
    r.seconds = median(trials[i][0]), r.all_cores = median(trials[i][1]);
    r.concurrent = median(trials[i][2]), r.oversubscribed = median(trials[i][3]);
    r.crowded = median(trials[i][4]);
    // Only shapes whose GEMMs the kernels split say what splitting gains.
    if (splittable_share(a, t.global_batch, 1) >= 0.9) speedups.push_back(r.seconds / r.all_cores);
    std::array<double, 6> row{r.flops / r.seconds, 0, 0, 0, r.params / r.seconds, 1 / r.seconds};
    row[element_column(a.kind)] = r.elements / r.seconds;
    rows.push_back(row);
    c.runs.push_back(r);
  }
  const std::array<double, 6> k = fit(rows);

  Hardware& hw = c.hw;
  hw.name = "calibrated";
  hw.source = "dtsim estimate --calibrate on this machine";
  hw.peak_flops = k[0] > 0 ? 1 / k[0] : 1e30;  // one rank's GEMM rate on one core
  hw.efficiency = 1;
  hw.element_seconds = k[1], hw.moe_element_seconds = k[2], hw.gpt_element_seconds = k[3];
  hw.param_seconds = k[4], hw.step_seconds = k[5];
  hw.parallel_speedup = speedups.empty() ? 1 : std::max(1.0, median(speedups));
  // How ranks share the cores: the ddp runs on `cores`, 2 x and 4 x `cores` rank threads.
  for (size_t i = 0; i < c.runs.size(); ++i) {
    c.runs[i].fitted = fitted_seconds(hw, c.runs[i], configs[i].second, 1);
  }
  for (int j = 0; j < 3; ++j) {
    std::vector<double> measured;
    for (const CalibrationRun& r : c.runs) {
      measured.push_back(j == 0 ? r.concurrent : j == 1 ? r.oversubscribed : r.crowded);
    }
    set_sharing(hw, j, fit_sharing(hw, c.runs, configs, measured, cores << j));
  }

  hw.devices_per_node = World::kMaxRanks;  // one machine: every group is "intra"
  {
    World two(2);
    measure_links(two, c);
  }
  // Twice as many ranks as cores: a message waits for its peer's turn on a core.
  c.oversubscribed_ranks = std::min(World::kMaxRanks, 2 * std::max(2, cores));
  {
    World over(c.oversubscribed_ranks);
    c.oversubscribed_seconds = probe_seconds(over, Probe::kAllGather, over.size(), 200);
  }
  hw.oversubscribed_latency = c.oversubscribed_seconds / (c.oversubscribed_ranks - 1);
  hw.memory_bytes = 0;
  hw.cores = cores;
  // Ring attention's blocks: what the projection of the cp run, without them, leaves out;
  // then the expert-parallel run's, over its expert compute.
  const Projection ring_p = project_run(ring, hw);
  c.ring_name = ring_name;
  c.ring_seconds = median(ring_trials);
  c.ring_projected = ring_p.step;
  const double blocks =
      ring_attention_blocks(architecture(ring), ring.global_batch, 1, 2, Recompute::kNone);
  hw.ring_block_seconds = std::max(0.0, c.ring_seconds - ring_p.step) / (blocks * ring_p.sharing);
  if (!expert) return c;  // no shape's experts split 2 x cores ways: expert_imbalance 0
  const Projection expert_p = project_run(expert->second, hw);
  c.expert_name = expert->first;
  c.expert_seconds = median(expert_trials);
  c.expert_projected = expert_p.step;
  hw.expert_imbalance =
      std::max(0.0, c.expert_seconds - expert_p.step) / std::max(1e-12, expert_p.expert_compute);
  return c;
}

Calibration calibrate_links(const Hardware& base, const ProcessModel& model) {
  Calibration c;
  c.hw = base;
  c.hw.name = "calibrated";
  c.hw.source = fmt::format("dtsim estimate --calibrate under mpirun ({}), compute from {}",
                            model.describe(), base.source);
  const int n = model.world_size();
  if (n < 2) throw UsageError("--calibrate under mpirun needs 2 or more ranks");
  {
    World world(model);
    measure_links(world, c);
  }
  // The job's ddp steps on the calibration shapes, as calibrate() measures a thread world's,
  // with its rank threads a process and twice as many: the sharing regimes of their worlds
  // (against base's cores) get the job's slowdowns and all_reduce costs; the others stay
  // base's. Every process runs them; global rank 0 fits.
  const auto configs = calibration_configs();
  c.job_ranks = {n, 2 * n};
  std::vector<std::array<std::vector<double>, 2>> trials(configs.size());
  for (int trial = 0; trial < kTrials; ++trial) {
    for (size_t i = 0; i < configs.size(); ++i) {
      for (int k = 0; k < 2; ++k) {
        TrainConfig ddp = ddp_config(configs[i].second, c.job_ranks[k]);
        ddp.threads_per_process = model.threads << k;
        const std::optional<RunResult> result = launch_training(ddp);
        if (result) trials[i][k].push_back(result->seconds_per_step);
      }
    }
  }
  if (trials[0][0].empty()) return c;  // not global rank 0: prints and writes nothing
  for (size_t i = 0; i < configs.size(); ++i) {
    CalibrationRun r = calibration_run(configs[i].first, configs[i].second);
    r.concurrent = median(trials[i][0]), r.oversubscribed = median(trials[i][1]);
    c.runs.push_back(r);
  }
  const int cores = base.cores > 0 ? base.cores : n;
  for (int k = 0; k < 2; ++k) {
    std::vector<double> measured;
    for (const CalibrationRun& r : c.runs)
      measured.push_back(k == 0 ? r.concurrent : r.oversubscribed);
    const std::array<double, 2> s = fit_sharing(c.hw, c.runs, configs, measured, c.job_ranks[k]);
    set_sharing(c.hw, regime(c.job_ranks[k], cores), s);
    c.job_slowdown[k] = s[0], c.job_sync_seconds[k] = s[1];
  }
  return c;
}

}  // namespace dtsim::train::estimator
