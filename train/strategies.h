// One entry point per strategy, each in a file of its own that opens with the algorithm in
// the paper's terms; run_training() validates the configuration and dispatches.
#pragma once

#include "train/config.h"
#include "train/result.h"

namespace dtsim::train {

// Throws UsageError with one line naming the flag and the constraint when `config` cannot
// run (batch not divisible by the data-parallel ranks, TP width not dividing the hidden
// width, more expert ranks than experts, a strategy that does not fit the model, ...).
void validate(const TrainConfig& config);

// validate(), then the strategy's run.
RunResult run_training(const TrainConfig& config);

RunResult run_single(const TrainConfig& config);  // reference.cc
RunResult run_accum(const TrainConfig& config);   // reference.cc
RunResult run_ddp(const TrainConfig& config);     // ddp.cc
RunResult run_zero(const TrainConfig& config);    // zero.cc (stage from config.strategy)
RunResult run_tp(const TrainConfig& config);      // tensor_parallel.cc
RunResult run_ep(const TrainConfig& config);      // expert_parallel.cc
RunResult run_dp_tp(const TrainConfig& config);   // dp_tp.cc

}  // namespace dtsim::train
