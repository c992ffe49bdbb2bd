// What every multi-rank strategy (DDP, ZeRO-1/2/3, TP, DP x TP, EP) does the same way around
// its algorithm: which samples a data-parallel rank takes, the per-rank reports, loss board
// and step times that rank threads fill in, and the RunResult built from them.
//
// Thread safety: RunFrame is written by every rank thread at its own slots (rank 0 alone
// writes step_seconds; params by rank 0, by disjoint shards, or after World::run) and read
// after World::run returns. A RankFrame belongs to one rank thread.
#pragma once

#include <chrono>
#include <vector>

#include "runtime/world.h"
#include "train/accounting.h"
#include "train/config.h"
#include "train/result.h"

namespace dtsim::train {

// Data-parallel rank r's micro-batch m of a step: samples [first(r, m), first(r, m) + size)
// of the global batch, the same slices run_accum's group r uses.
struct MicroBatches {
  MicroBatches(const TrainConfig& c, int ranks)
      : count(c.micro_batches), size(c.global_batch / (ranks * c.micro_batches)) {}
  int first(int rank, int m) const { return (rank * count + m) * size; }
  // grad_scale of each micro-batch: the mean over the rank's B/N samples.
  float grad_scale() const { return 1.0f / static_cast<float>(count * size); }
  int count;  // M micro-batches per rank per step
  int size;   // samples per micro-batch
};

struct RunFrame {
  // `loss_slots` columns of the loss board: one per data-parallel rank or replica.
  RunFrame(const TrainConfig& c, int loss_slots) : board(c.steps, loss_slots), reports(c.ranks) {}
  explicit RunFrame(const TrainConfig& c) : RunFrame(c, c.ranks) {}
  LossBoard board;
  std::vector<RankReport> reports;
  std::vector<float> params;         // the final full parameters
  std::vector<double> step_seconds;  // rank 0's wall time per step
};

// One rank's part of a RunFrame: its report, its timeline (recording when config.trace) and
// its peak memory.
class RankFrame {
 public:
  RankFrame(RunFrame& frame, const TrainConfig& config, int rank)
      : frame_(frame),
        rank_(rank),
        on_step_(config.on_step),
        timeline_(config.trace ? &frame.reports[rank].timeline : nullptr) {}
  RankFrame(const RankFrame&) = delete;
  RankFrame& operator=(const RankFrame&) = delete;

  RankTimeline& timeline() { return timeline_; }
  PeakMemory& peak() { return peak_; }
  // Ends the step that began at `start`: rank 0 records its wall time.
  void end_step(std::chrono::steady_clock::time_point start) {
    if (rank_ != 0) return;
    frame_.step_seconds.push_back(seconds_since(start));
    if (on_step_) on_step_(static_cast<int>(frame_.step_seconds.size()));
  }
  // Writes the peak memory into this rank's report; call after the last step.
  void finish() { frame_.reports[rank_].memory = peak_.bytes(); }

 private:
  RunFrame& frame_;
  int rank_;
  const std::function<void(int)>& on_step_;
  RankTimeline timeline_;
  PeakMemory peak_;
};

// The RunResult of a finished run on `world`: losses from the board, the frame's params,
// median step time, and every rank's report with its traffic counters and flight record.
inline RunResult collect(RunFrame& frame, const World& world, const TrainConfig& config) {
  RunResult result;
  result.losses = frame.board.losses(config.global_batch);
  result.params = std::move(frame.params);
  result.steps = config.steps;
  result.seconds_per_step = median_seconds(frame.step_seconds);
  for (int r = 0; r < world.size(); ++r) {
    frame.reports[r].rank = r;
    frame.reports[r].counters = world.counters(r);
    frame.reports[r].flight = world.flight_record(r);
  }
  result.ranks = std::move(frame.reports);
  return result;
}

}  // namespace dtsim::train
