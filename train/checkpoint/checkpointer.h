// Checkpointer: one rank's side of --save and --resume. It maps the rank's state
// (rank_state.h: parameter buffers in local layouts, optimizer runs) onto the full model's
// tensors by name and the run's placements (placement_plan.h), and
//   save: writes the chunks this rank is the writer of (each element by one rank) into its
//         shard file, then takes part in the commit (store.h); collective over the world;
//   restore: reads, for every tensor its new layout holds, only the chunks that overlap it
//         (checksums verified), so a resume on the same mesh and one on any other mesh
//         (dp, tp, pp, ep, ZeRO stage, rank count) are the same code.
// The data position is the step: sample i of step s comes from (seed, s, i) (trainee.h), so
// a run resumed at step s takes exactly the samples it would have taken, on any mesh; the
// optimizer's step count is the step too. Nothing else is random.
//
// Thread safety: one per rank thread.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "train/checkpoint/format.h"
#include "train/checkpoint/rank_state.h"
#include "train/config.h"
#include "train/placement_plan.h"
#include "train/report_channel.h"

namespace dtsim::train::checkpoint {

// The tensor kinds a run of `config` saves: "params", then its optimizer's per-element state
// ("master" under mixed precision, "adam_m" and "adam_v", or "momentum").
std::vector<std::string> state_kinds(const TrainConfig& config);
// Every global tensor a checkpoint of `config` holds, "kind/name" -> shape (no chunks).
std::map<std::string, TensorMeta> expected_tensors(const TrainConfig& config);
// What metadata.json records of the run that saved it.
SavedFrom saved_from(const TrainConfig& config);

class Checkpointer {
 public:
  // `channel`: the world's reporting channel (its barrier); null on a single rank.
  Checkpointer(const TrainConfig& config, ReportChannel* channel, RankState state);
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Loads config.checkpoint.resume_dir into the rank's state; returns the step to start at
  // (0 without --resume).
  int restore();
  // Collective: saves after `done` steps when the options say so.
  void after_step(int done);

 private:
  void save(int64_t step);
  void barrier();

  const TrainConfig& config_;
  ReportChannel* channel_;
  RankState state_;
  ModelPlacement placement_;  // where each local tensor lies in the global one
  MeshCoord at_;
};

}  // namespace dtsim::train::checkpoint
