// One entry point per strategy, each in a file of its own that opens with the algorithm in
// the paper's terms and runs through the one step runner (step_runner.h) on a World from
// launch.h; launch_training() validates the configuration and dispatches.
//
// A multi-rank run's RunResult exists only in the process that holds global rank 0 (every
// rank's outcome reaches it through collectives): the distributed entry points return
// std::nullopt in any other process. The references run on the calling rank alone.
#pragma once

#include <optional>

#include "train/config.h"
#include "train/result.h"

namespace dtsim::train {

// Throws UsageError with one line naming the flag and the constraint when `config` cannot
// run (batch not divisible by the data-parallel ranks, TP width not dividing the hidden
// width, more expert ranks than experts, a strategy that does not fit the model, ...).
void validate(const TrainConfig& config);

// validate(), then the strategy's run; empty in a process without global rank 0.
std::optional<RunResult> launch_training(const TrainConfig& config);

// launch_training() for callers that run where global rank 0 is (tests, check.h, the
// thread world): throws Error in a process without it.
RunResult run_training(const TrainConfig& config);

RunResult run_single(const TrainConfig& config);  // reference.cc
RunResult run_accum(const TrainConfig& config);   // reference.cc
// Every strategy without pipeline stages (ddp, zero1-3, tp, ep, dp-tp, a dp x tp x ep mesh):
// the model-parallel layers of each rank in the one data-parallel wrapper (run_mesh.cc).
std::optional<RunResult> run_mesh(const TrainConfig& config);
// The presets by name, for tests and callers that name one (each is run_mesh).
inline std::optional<RunResult> run_ddp(const TrainConfig& c) { return run_mesh(c); }
inline std::optional<RunResult> run_zero(const TrainConfig& c) { return run_mesh(c); }
inline std::optional<RunResult> run_tp(const TrainConfig& c) { return run_mesh(c); }
inline std::optional<RunResult> run_ep(const TrainConfig& c) { return run_mesh(c); }
inline std::optional<RunResult> run_dp_tp(const TrainConfig& c) { return run_mesh(c); }
// Pipeline parallel (config.widths.pp > 1) on the Mesh (pipeline_parallel/pipeline_parallel.cc).
std::optional<RunResult> run_pipeline(const TrainConfig& config);

}  // namespace dtsim::train
