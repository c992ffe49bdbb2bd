#include "train/step_runner.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <memory>
#include <utility>

#include "train/checkpoint/checkpointer.h"
#include "train/trainee.h"

namespace dtsim::train {

std::vector<MicroBatch> data_parallel_micro_batches(const TrainConfig& config, int ranks, int rank,
                                                    float grad_scale) {
  const int count = config.micro_batches, size = config.global_batch / (ranks * count);
  if (grad_scale == 0) grad_scale = 1.0f / static_cast<float>(count * size);
  std::vector<MicroBatch> out;
  for (int m = 0; m < count; ++m) {
    out.push_back({.first = (rank * count + m) * size,
                   .size = size,
                   .grad_scale = grad_scale,
                   .write_grads = m == 0});
  }
  return out;
}

float run_micro_batch(Trainee& trainee, int step, const MicroBatch& mb, PhaseHooks& hooks) {
  const float loss =
      trainee.forward_backward(step, mb.first, mb.size, mb.grad_scale, &hooks, mb.write_grads);
  hooks.finish();
  return loss;
}

StepRunner::StepRunner(const TrainConfig& config, ReportChannel* channel, int loss_slots)
    : config_(config),
      channel_(channel),
      loss_slots_(loss_slots),
      timeline_(config.trace ? &outcome_.report.timeline : nullptr) {
  outcome_.report.rank = channel != nullptr ? channel->rank() : 0;
}

void StepRunner::run(RankStrategy& s) {
  const std::vector<MicroBatch> micro = s.micro_batches();
  std::vector<double> sums(loss_slots_);
  std::vector<float> losses;                        // per micro-batch of the step
  std::unique_ptr<checkpoint::Checkpointer> saves;  // --save, --resume
  int first = 0;
  if (config_.checkpoint.active()) {
    saves = std::make_unique<checkpoint::Checkpointer>(config_, channel_, s.checkpoint_state());
    first = saves->restore();
  }
  for (int step = first; step < config_.steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    std::fill(sums.begin(), sums.end(), 0.0);
    s.before_step(step);
    if (config_.poison_gradients) poison_gradients();
    losses.assign(micro.size(), 0.0f);
    if (!s.run_micro_batches(step, micro, &losses)) {
      for (size_t i = 0; i < micro.size(); ++i) {
        s.before_micro_batch(static_cast<int>(i));
        losses[i] = s.forward_backward(step, micro[i]);
        s.after_micro_batch(static_cast<int>(i));
      }
    }
    for (size_t i = 0; i < micro.size(); ++i) {
      const MicroBatch& mb = micro[i];
      if (mb.reports_loss) sums[mb.loss_slot] += static_cast<double>(losses[i]) * mb.size;
    }
    s.sync_gradients();
    timeline_.phase("optimizer", [&] { s.optimizer_step(); });
    s.sync_params();
    s.observe_memory(peak_);
    outcome_.step_seconds.push_back(seconds_since(start));
    const double loss = step_loss(sums);
    outcome_.losses.push_back(loss);
    const bool root = channel_ == nullptr || channel_->rank() == 0;
    if (root && config_.on_step) config_.on_step(step + 1, loss);
    if (config_.record_history) outcome_.history.push_back(s.final_params());
    if (config_.lockstep != nullptr) outcome_.step_sizes.push_back(s.step_sizes());
    if (saves) saves->after_step(step + 1);
  }
  outcome_.params = s.final_params();
  outcome_.report.memory = peak_.bytes();
}

double StepRunner::step_loss(std::vector<double>& sums) {
  const std::vector<double>* all = &sums;
  if (channel_ != nullptr && channel_->size() > 1) {
    gathered_.resize(sums.size() * channel_->size());
    channel_->all_gather(sums, gathered_);
    all = &gathered_;
  }
  double total = 0;  // rank order, then slot order
  for (double s : *all) total += s;
  return total / config_.global_batch;
}

void StepRunner::poison_gradients() {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (std::span<float> g : grads_fp32_) std::fill(g.begin(), g.end(), nan);
  for (std::span<BFloat16> g : grads_bf16_) std::fill(g.begin(), g.end(), BFloat16(nan));
}

RankOutcome StepRunner::take_outcome() { return std::move(outcome_); }

}  // namespace dtsim::train
