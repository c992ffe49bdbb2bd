// --check: which single-rank reference a run is compared against, and with which
// tolerance. The rules are the ones tests/train states for each strategy, gathered in one
// place so that `dtsim train --check` and `dtsim demo` judge a run as the tests do:
//   - DDP and ZeRO under Algo::kDeterministic do the reference's float operations in the
//     same order: bitwise equal to accumulation over the same micro-batches (ZeRO-3 with
//     several micro-batches reduce-scatters each one: within tolerance);
//   - MoE runs (any data-parallel strategy, ep) against accumulation over the same per-rank
//     micro-batches, since expert capacity and the aux loss depend on the token grouping;
//   - everything else against plain single-rank training within tolerance;
//   - tolerances: fp32 rtol 1e-5 atol 1e-6; bf16 two rounding steps, rtol 2/256 atol 2e-3;
//     ep with bf16 Adam also allows one Adam step (lr) on at most 1% of the parameters.
#pragma once

#include <string>

#include "train/config.h"
#include "train/result.h"

namespace dtsim::cli {

struct CheckPlan {
  train::TrainConfig reference;  // the configuration of the reference run
  bool bitwise = false;          // pass only when parameters and losses are identical
  double rtol = 0, atol = 0;     // allclose tolerance when not bitwise
  double adam_step_slack = 0;    // ep + bf16 Adam: extra lr allowed on <= 1% of parameters
  std::string description;       // "bitwise vs accum", "vs single, rtol 1e-05 atol 1e-06"
};

struct CheckResult {
  train::Comparison comparison;
  bool passed = false;
  std::string reference_name;  // "single" or "accum"
  std::string criterion;       // what passing means, e.g. "bitwise" or "rtol 1e-05 atol 1e-06"
};

// The reference run and criterion that tests/train apply to `config`.
CheckPlan plan_check(const train::TrainConfig& config);

// Judges `run` against `reference` (the result of running plan.reference).
CheckResult judge(const CheckPlan& plan, const train::RunResult& run,
                  const train::RunResult& reference);

}  // namespace dtsim::cli
