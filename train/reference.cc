// The references every strategy is checked against, on one rank and without communication.
//
// run_single: plain training on the whole global batch B per step: zero_grad, forward and
// backward with grad_scale 1/B (the gradient of the mean loss), one optimizer step.
//
// run_accum: single-rank gradient accumulation arranged exactly as data-parallel training
// with R = config.ranks ranks and M = config.micro_batches micro-batches per rank would
// arrange it. The global batch is cut into R groups of M micro-batches of B/(R*M) samples;
// group g's micro-batches are accumulated into zeroed gradients with grad_scale 1/(B/R) (the
// mean over the group, as a DDP rank computes it), the group gradients are summed in group
// order (fp32, or bf16 rounded after each add, as the runtime's deterministic reduction
// does), then divided by R. With R = 1 this is textbook accumulation over M micro-batches.
// DDP under Algo::kDeterministic does the same float operations in the same order, so the
// two are bitwise equal. For MoE this is also the exact reference for every data-parallel
// run: the aux loss and expert capacity depend on which tokens are batched together, so only
// a reference with the same per-rank micro-batches sees the same routing. With
// config.reverse_accumulation the groups (and each group's micro-batches) are visited last
// to first: the same micro-batches and routing, only the order of the sums differs.
#include <chrono>
#include <vector>

#include "train/accounting.h"
#include "train/grad_ops.h"
#include "train/slice_optimizer.h"
#include "train/strategies.h"
#include "train/trainee.h"

namespace dtsim::train {
namespace {

// Single-rank bookkeeping shared by both references.
struct SoloRun {
  explicit SoloRun(const TrainConfig& config)
      : trainee(config), timeline(config.trace ? &report.timeline : nullptr), hooks(&timeline) {}
  Trainee trainee;
  RankReport report;
  RankTimeline timeline;
  PhaseHooks hooks;
  PeakMemory peak;
  std::vector<double> step_seconds;
};

RunResult finish(SoloRun& run, std::vector<double> losses, int steps) {
  RunResult result;
  result.losses = std::move(losses);
  result.params = run.trainee.store().params_as_float();
  result.steps = steps;
  result.seconds_per_step = median_seconds(run.step_seconds);
  run.report.memory = run.peak.bytes();
  result.ranks.push_back(std::move(run.report));
  return result;
}

}  // namespace

RunResult run_single(const TrainConfig& config) {
  SoloRun run(config);
  std::vector<double> losses;
  model::ParamStore& store = run.trainee.store();
  with_buffers(store, [&](auto params, auto grads) {
    auto opt = make_slice_optimizer(config, params, &run.trainee.memory());
    for (int step = 0; step < config.steps; ++step) {
      const auto start = std::chrono::steady_clock::now();
      store.zero_grad();
      const float scale = 1.0f / static_cast<float>(config.global_batch);
      losses.push_back(
          run.trainee.forward_backward(step, 0, config.global_batch, scale, &run.hooks));
      run.hooks.finish();
      run.timeline.phase("optimizer", [&] { opt->step(params, grads); });
      run.peak.observe(run.trainee.memory());
      run.step_seconds.push_back(seconds_since(start));
      if (config.on_step) config.on_step(step + 1);
    }
  });
  return finish(run, std::move(losses), config.steps);
}

RunResult run_accum(const TrainConfig& config) {
  SoloRun run(config);
  const int groups = config.ranks, micro = config.micro_batches;
  const int micro_size = config.global_batch / (groups * micro);
  const float scale = 1.0f / static_cast<float>(micro * micro_size);
  LossBoard board(config.steps, groups);
  model::ParamStore& store = run.trainee.store();
  with_buffers(store, [&](auto params, auto grads) {
    using T = typename decltype(grads)::value_type;
    auto opt = make_slice_optimizer(config, params, &run.trainee.memory());
    std::vector<T> sum(grads.size());
    for (int step = 0; step < config.steps; ++step) {
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < groups; ++i) {
        const int g = config.reverse_accumulation ? groups - 1 - i : i;
        store.zero_grad();
        for (int j = 0; j < micro; ++j) {
          const int m = config.reverse_accumulation ? micro - 1 - j : j;
          const int first = (g * micro + m) * micro_size;
          board.add(step, g,
                    run.trainee.forward_backward(step, first, micro_size, scale, &run.hooks),
                    micro_size);
          run.hooks.finish();
        }
        if (i == 0) {
          std::copy(grads.begin(), grads.end(), sum.begin());
        } else {
          add_into(std::span<T>(sum), std::span<const T>(grads));
        }
      }
      std::copy(sum.begin(), sum.end(), grads.begin());
      divide(grads, groups);
      run.timeline.phase("optimizer", [&] { opt->step(params, grads); });
      run.peak.observe(run.trainee.memory());
      run.step_seconds.push_back(seconds_since(start));
      if (config.on_step) config.on_step(step + 1);
    }
  });
  return finish(run, board.losses(config.global_batch), config.steps);
}

}  // namespace dtsim::train
