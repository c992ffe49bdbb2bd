// Training-step suite: one optimizer step per strategy, SGD, fp32, global batch 64.
//
// - MLP: D = 256, hidden 1024 (2 blocks, 4 outputs): single (N = 1), ddp, zero1, zero2,
//   zero3, tp at N in {1, 2, 4}, dp-tp at N = 4 (2 x 2).
// - MoE: D_in = 256, d_model 256, d_ff 1024, 4 experts, top-1: single, ddp, ep.
//
// Each benchmark iteration is one train::run_training of kSteps steps; its time is the
// run's own seconds_per_step (median over steps after the first, wall clock inside the
// ranks), so neither World start-up nor the first step's allocations are timed. Before
// timing, every (strategy, model, N) is verified once against the single-rank reference on
// the same global batch (losses and parameters within 1e-3 relative, 1e-4 absolute).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <map>
#include <string>
#include <utility>

#include "train/strategies.h"

namespace dtsim::bench {
namespace {

using train::ModelKind;
using train::Strategy;

constexpr int kSteps = 6;

train::TrainConfig make_config(Strategy s, ModelKind m, int ranks) {
  train::TrainConfig c;
  c.strategy = s;
  c.model = m;
  c.ranks = ranks;
  c.steps = kSteps;
  c.global_batch = 64;
  c.optimizer = model::OptimizerKind::kSgd;
  c.precision = model::Precision::kFp32;
  c.mlp.input_dim = 256;
  c.mlp.hidden_dim = 1024;
  c.moe.input_dim = 256;
  c.moe.moe.d_model = 256;
  c.moe.moe.d_ff = 1024;
  c.moe.moe.num_experts = 4;
  c.moe.moe.top_k = 1;
  // No token dropping: with a capacity limit each rank drops by its own micro-batch, so
  // data-parallel MoE would legitimately differ from the single-rank reference.
  c.moe.moe.capacity_factor = 0;
  c.widths.tp = 2;
  return c;
}

const train::RunResult& reference(ModelKind m) {
  static std::map<ModelKind, train::RunResult> cache;
  auto it = cache.find(m);
  if (it == cache.end()) {
    it = cache.emplace(m, train::run_training(make_config(Strategy::kSingle, m, 1))).first;
  }
  return it->second;
}

void bm_train_step(benchmark::State& state, Strategy s, ModelKind m) {
  const int ranks = static_cast<int>(state.range(0));
  const train::TrainConfig config = make_config(s, m, ranks);
  try {
    train::validate(config);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  static std::map<std::tuple<int, int, int>, bool> verified;
  const auto key = std::make_tuple(int(s), int(m), ranks);
  if (!verified.count(key)) {
    const train::RunResult run = train::run_training(config);
    // atol 1e-4: the MoE's load-balancing loss is taken over each rank's micro-batch, which
    // moves router weights by ~3e-5 at N = 4 (losses still agree to 1e-7).
    const train::Comparison cmp = train::compare(run, reference(m), 1e-3, 1e-4);
    verified[key] = cmp.passed;
    if (!cmp.passed) {
      std::fprintf(stderr, "%s N=%d: max_abs_diff %g, max_rel_diff %g, max_loss_diff %g\n",
                   train::to_string(s), ranks, cmp.max_abs_diff, cmp.max_rel_diff,
                   cmp.max_loss_diff);
    }
  }
  if (!verified[key]) {
    state.SkipWithError("result differs from the single-rank reference");
    return;
  }
  double per_step = 0;
  double bytes = 0;
  for (auto _ : state) {
    const train::RunResult run = train::run_training(config);
    per_step = run.seconds_per_step;
    bytes = run.bytes_sent_per_step();
    state.SetIterationTime(per_step);
  }
  state.counters["samples_per_s"] = config.global_batch / per_step;
  state.counters["sent_MB_per_step"] = bytes / 1e6;
}

void register_all() {
  const std::pair<const char*, Strategy> mlp[] = {
      {"single", Strategy::kSingle}, {"ddp", Strategy::kDdp},     {"zero1", Strategy::kZero1},
      {"zero2", Strategy::kZero2},   {"zero3", Strategy::kZero3}, {"tp", Strategy::kTp},
      {"dp-tp", Strategy::kDpTp}};
  for (auto [name, s] : mlp) {
    auto* b = benchmark::RegisterBenchmark((std::string("mlp/") + name).c_str(), bm_train_step, s,
                                           ModelKind::kMlp);
    if (s == Strategy::kSingle) {
      b->Arg(1);
    } else if (s == Strategy::kDpTp) {
      b->Arg(4);
    } else {
      b->Arg(1)->Arg(2)->Arg(4);
    }
    b->ArgName("N")->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);
  }
  const std::pair<const char*, Strategy> moe[] = {
      {"single", Strategy::kSingle}, {"ddp", Strategy::kDdp}, {"ep", Strategy::kEp}};
  for (auto [name, s] : moe) {
    auto* b = benchmark::RegisterBenchmark((std::string("moe/") + name).c_str(), bm_train_step, s,
                                           ModelKind::kMoe);
    if (s == Strategy::kSingle) {
      b->Arg(1);
    } else {
      b->Arg(1)->Arg(2)->Arg(4);
    }
    b->ArgName("N")->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);
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
