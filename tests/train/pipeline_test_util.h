// Shared by the pipeline tests: readable names and printing of a ScheduleSpec.
#pragma once

#include <algorithm>
#include <ostream>
#include <string>

#include "model/memory.h"
#include "runtime/types.h"
#include "train/config.h"
#include "train/pipeline_parallel/schedule.h"

namespace dtsim::train::pipeline {

// gtest prints a failing parameter with this.
inline void PrintTo(const ScheduleSpec& s, std::ostream* os) {
  *os << to_string(s.kind) << " p " << s.stages << " m " << s.micro_batches << " v "
      << s.virtual_stages;
}

// "1f1b_p4_m8", "interleaved_p4_m8_v2": a test name.
inline std::string test_name(const ScheduleSpec& s) {
  std::string n = to_string(s.kind);
  std::replace(n.begin(), n.end(), '-', '_');
  n += "_p" + std::to_string(s.stages) + "_m" + std::to_string(s.micro_batches);
  if (s.kind == ScheduleKind::kInterleaved) n += "_v" + std::to_string(s.virtual_stages);
  return n;
}

// `config` (a kMesh config of either model) as a dp x pp run of `spec`: 8 samples per
// micro-batch per replica, 3 Adam steps under --algo deterministic (the bitwise setting).
inline TrainConfig pipeline_config(TrainConfig config, const ScheduleSpec& spec, int dp, int zero,
                                   model::Precision precision) {
  config.widths.dp = dp;
  config.widths.pp = spec.stages;
  config.schedule = spec.kind;
  config.virtual_stages = spec.virtual_stages;
  config.zero = zero;
  config.micro_batches = spec.micro_batches;
  config.global_batch = 8 * dp * spec.micro_batches;
  config.algo = Algo::kDeterministic;
  config.optimizer = model::OptimizerKind::kAdam;
  config.lr = 0.01f;
  config.precision = precision;
  config.steps = 3;
  return config;
}

}  // namespace dtsim::train::pipeline
