// What the data-parallel strategies (DDP, ZeRO-1/2/3) share: which samples rank r takes, the
// per-rank results that rank threads fill in, and the RunResult built from them.
//
// Thread safety: DataParallelShared is written by every rank thread at its own slots (rank
// 0 alone writes params and step_seconds) and read after World::run returns.
#pragma once

#include <vector>

#include "runtime/world.h"
#include "train/accounting.h"
#include "train/config.h"
#include "train/result.h"

namespace dtsim::train {

// Rank r's micro-batch m of a step: samples [first(r, m), first(r, m) + size) of the global
// batch, the same slices run_accum's group r uses.
struct MicroBatches {
  MicroBatches(const TrainConfig& c, int ranks)
      : count(c.micro_batches), size(c.global_batch / (ranks * c.micro_batches)) {}
  int first(int rank, int m) const { return (rank * count + m) * size; }
  // grad_scale of each micro-batch: the mean over the rank's B/N samples.
  float grad_scale() const { return 1.0f / static_cast<float>(count * size); }
  int count;  // M micro-batches per rank per step
  int size;   // samples per micro-batch
};

struct DataParallelShared {
  explicit DataParallelShared(const TrainConfig& c)
      : board(c.steps, c.ranks), reports(c.ranks), params() {}
  LossBoard board;
  std::vector<RankReport> reports;
  std::vector<float> params;         // the final full parameters (written by rank 0 or shards)
  std::vector<double> step_seconds;  // rank 0's wall time per step
};

// The RunResult of a finished data-parallel run on `world`.
inline RunResult collect(DataParallelShared& shared, const World& world,
                         const TrainConfig& config) {
  RunResult result;
  result.losses = shared.board.losses(config.global_batch);
  result.params = std::move(shared.params);
  result.steps = config.steps;
  result.seconds_per_step = median_seconds(shared.step_seconds);
  for (int r = 0; r < world.size(); ++r) {
    shared.reports[r].rank = r;
    shared.reports[r].counters = world.counters(r);
  }
  result.ranks = std::move(shared.reports);
  return result;
}

}  // namespace dtsim::train
