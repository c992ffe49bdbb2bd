// The training step, written once for every strategy and both references:
//
//   for step:  for micro-batch: forward and backward, with the strategy's hooks
//                (or the strategy runs all of the step's micro-batches in an order of its
//                own, run_micro_batches: a pipeline stage's schedule); the first backward
//                writes the gradients, the others add to them (MicroBatch::write_grads):
//                no zero_grad pass
//              sync_gradients; optimizer_step ("optimizer" on the timeline); sync_params
//              peak memory; step time; the step's global mean loss; on_step(step, loss)
//
// A strategy supplies only what differs, as a RankStrategy: which samples each micro-batch
// takes, its layer hooks (inside forward_backward), its gradient and parameter communication,
// the slice its optimizer updates, and its part of the final parameters. The runner owns the
// rank's measurements (timeline, peak memory, step times, losses) and returns them as a
// RankOutcome; nothing is written to memory that another rank reads.
//
// Losses: each micro-batch's mean loss times its samples is added to one of the rank's loss
// slots (a data-parallel rank has one; run_accum one per group). After the step the slot
// sums of every rank travel by all_gather on the ReportChannel, and every rank adds them in
// rank order, slot order, and divides by the global batch: the loss single-rank training
// would report, the same bits on every rank and in every process model.
//
// Thread safety: a StepRunner and its RankStrategy belong to one rank thread.
#pragma once

#include <span>
#include <vector>

#include "common/bf16.h"
#include "train/accounting.h"
#include "train/checkpoint/rank_state.h"
#include "train/config.h"
#include "train/rank_outcome.h"
#include "train/report_channel.h"

namespace dtsim::train {

// One micro-batch of a step on one rank: samples [first, first + size) of the step's global
// batch, gradients scaled by grad_scale, loss added to slot loss_slot unless !reports_loss
// (a rank whose loss another rank of its group already reports, as in tensor parallelism).
// write_grads: its backward OVERWRITES the model's gradients (model::BackwardScale), bitwise
// zero_grad then accumulate; set on the first micro-batch of whatever the gradients sum
// (the step, an accumulation group), so no strategy zeroes the gradients first.
struct MicroBatch {
  int first = 0;
  int size = 0;
  float grad_scale = 0;
  int loss_slot = 0;
  bool reports_loss = true;
  bool write_grads = false;
};

// Data-parallel rank r's M micro-batches of a step: micro-batch m takes samples
// [(r M + m) b, (r M + m + 1) b) with b = B / (ranks M), the same slices run_accum's group r
// uses, and grad_scale = 1 / (M b) (the mean over the rank's samples) unless given;
// micro-batch 0 writes the gradients, the others accumulate.
std::vector<MicroBatch> data_parallel_micro_batches(const TrainConfig& config, int ranks, int rank,
                                                    float grad_scale = 0);

class Trainee;
// Forward and backward of micro-batch mb of step `step` through `hooks`, then the hooks'
// phase closed (PhaseHooks::finish): every strategy's forward_backward. Returns the loss.
float run_micro_batch(Trainee& trainee, int step, const MicroBatch& mb, PhaseHooks& hooks);

// What one strategy does on one rank, in the order the runner calls it each step.
class RankStrategy {
 public:
  virtual ~RankStrategy() = default;
  // The micro-batches of every step, in the order they run.
  virtual std::vector<MicroBatch> micro_batches() const = 0;
  virtual void before_micro_batch(int /*index*/) {}
  // Forward and backward of one micro-batch with the strategy's hooks; returns its mean loss.
  virtual float forward_backward(int step, const MicroBatch& mb) = 0;
  // A strategy that orders its micro-batches itself (a pipeline stage) overrides this: it
  // runs forward and backward of every micro-batch of `mbs` (micro_batches()) and sets
  // (*losses)[i] to micro-batch i's mean loss (any value where !mbs[i].reports_loss); the
  // runner then adds the losses in micro-batch order as its own loop does, and calls neither
  // before_micro_batch, forward_backward nor after_micro_batch. Returns false (the default)
  // to leave the step to the runner's loop.
  virtual bool run_micro_batches(int /*step*/, const std::vector<MicroBatch>& /*mbs*/,
                                 std::vector<float>* /*losses*/) {
    return false;
  }
  virtual void after_micro_batch(int /*index*/) {}
  // Communication after backward (DDP's unbucketed all-reduce, ZeRO's reduce-scatter, ...).
  virtual void sync_gradients() {}
  // The optimizer over this rank's slice.
  virtual void optimizer_step() = 0;
  // Communication after the optimizer (ZeRO-1/2's all-gather of the updated shards).
  virtual void sync_params() {}
  virtual void observe_memory(PeakMemory& peak) = 0;
  // After the last step: this rank's part of the final parameters (fp32), for the strategy's
  // assemble function on rank 0 (launch.h); also after every step under
  // TrainConfig::record_history.
  virtual std::vector<float> final_params() = 0;
  // Before step `step` begins (the references start it from TrainConfig::lockstep).
  virtual void before_step(int /*step*/) {}
  // After the optimizer step, under TrainConfig::lockstep (the references): how far each
  // parameter moved per unit of its gradient (SliceOptimizer::step_sizes); empty if unknown.
  virtual std::vector<float> step_sizes() { return {}; }
  // What --save and --resume read and write (train/checkpoint/); empty: not supported.
  virtual checkpoint::RankState checkpoint_state() { return {}; }
};

class StepRunner {
 public:
  // `channel` carries the loss sums (null: a single rank, nothing to send); `loss_slots` per
  // rank. config.on_step runs on channel rank 0 (or the single rank) after every step.
  StepRunner(const TrainConfig& config, ReportChannel* channel, int loss_slots = 1);
  StepRunner(const StepRunner&) = delete;
  StepRunner& operator=(const StepRunner&) = delete;

  // For the strategy's hooks, before run().
  RankTimeline& timeline() { return timeline_; }
  PeakMemory& peak() { return peak_; }
  // Gradient buffers a step must write before it reads them (a model's, a ZeRO-3 shard's);
  // before run(), and they must outlive it. Under config.poison_gradients the runner fills
  // them with NaN before every step, so a strategy that reads a gradient left from the
  // previous step (instead of writing it) ends in NaN.
  void add_gradients(std::span<float> grads) { grads_fp32_.push_back(grads); }
  void add_gradients(std::span<BFloat16> grads) { grads_bf16_.push_back(grads); }

  // Runs config.steps steps of `strategy`, then takes its final params.
  void run(RankStrategy& strategy);
  // After run(): the rank's outcome (counters and flight record are the launcher's to add).
  RankOutcome take_outcome();

 private:
  double step_loss(std::vector<double>& sums);
  void poison_gradients();

  const TrainConfig& config_;
  ReportChannel* channel_;
  int loss_slots_;
  RankOutcome outcome_;
  RankTimeline timeline_;
  PeakMemory peak_;
  std::vector<double> gathered_;  // every rank's slot sums of the step
  std::vector<std::span<float>> grads_fp32_;
  std::vector<std::span<BFloat16>> grads_bf16_;
};

}  // namespace dtsim::train
