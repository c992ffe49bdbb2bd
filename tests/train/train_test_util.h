// Small models and helpers shared by the train tests: configs that train in milliseconds,
// the tolerances every comparison states, and the static memory of a rank.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <ostream>

#include "model/memory.h"
#include "train/check.h"
#include "train/config.h"
#include "train/result.h"
#include "train/strategies.h"

namespace dtsim::train {

// The stated tolerances, from train/check.h (the one place that decides them): fp32 rtol
// 1e-5 atol 1e-6; bf16 two rounding steps, rtol 2/256 atol 2e-3.
inline const double kFp32Rtol = stated_tolerance(model::Precision::kFp32).rtol;
inline const double kFp32Atol = stated_tolerance(model::Precision::kFp32).atol;
inline const double kBf16Rtol = stated_tolerance(model::Precision::kMixedBf16).rtol;
inline const double kBf16Atol = stated_tolerance(model::Precision::kMixedBf16).atol;

inline TrainConfig mlp_config(Strategy s, int ranks) {
  TrainConfig c;
  c.strategy = s;
  c.model = ModelKind::kMlp;
  c.ranks = ranks;
  c.steps = 4;
  c.global_batch = 48;
  c.mlp = {.input_dim = 8, .hidden_dim = 24, .num_blocks = 2, .output_dim = 4};
  c.lr = 0.05f;
  return c;
}

inline TrainConfig moe_config(Strategy s, int ranks) {
  TrainConfig c = mlp_config(s, ranks);
  c.model = ModelKind::kMoe;
  c.moe.input_dim = 8;
  c.moe.num_classes = 4;
  c.moe.moe = {.d_model = 8,
               .d_ff = 16,
               .num_experts = 4,
               .top_k = 2,
               .capacity_factor = 1.25f,
               .aux_alpha = 0.01f};
  return c;
}

inline TrainConfig with_adam(TrainConfig c) {
  c.optimizer = model::OptimizerKind::kAdam;
  c.lr = 0.01f;
  return c;
}

inline TrainConfig with_bf16(TrainConfig c) {
  c.precision = model::Precision::kMixedBf16;
  return c;
}

// Model-state bytes of one rank (every category but activations).
inline int64_t static_bytes(const RankReport& r) {
  int64_t sum = 0;
  for (int c = 0; c < model::kNumMemoryCategories; ++c) {
    if (c != static_cast<int>(model::MemoryCategory::kActivations)) sum += r.memory[c];
  }
  return sum;
}

inline int64_t category(const RankReport& r, model::MemoryCategory c) {
  return r.memory[static_cast<int>(c)];
}

inline std::ostream& operator<<(std::ostream& os, const Comparison& c) {
  return os << "bitwise " << c.bitwise_equal << ", max |dparam| " << c.max_abs_diff << ", max rel "
            << c.max_rel_diff << ", max |dloss| " << c.max_loss_diff;
}

inline std::ostream& operator<<(std::ostream& os, const CheckResult& r) {
  os << r.verdict_text << " (" << r.criterion << " vs " << r.reference_name << "; " << r.comparison;
  if (r.floor_measured) os << "; floor " << r.floor << ", loss floor " << r.loss_floor;
  return os << ")";
}

// Runs `config` and judges it as `dtsim train --check` does (train/check.h).
inline CheckResult run_and_check(const TrainConfig& config, RunResult* run_out = nullptr) {
  RunResult run = run_training(config);
  CheckResult r = check(config, run);
  if (run_out != nullptr) *run_out = std::move(run);
  return r;
}

// Calls of one collective kind per step on rank `rank`.
inline double calls_per_step(const RunResult& r, OpKind op, int rank = 0) {
  return static_cast<double>(r.ranks[rank].counters[op].calls) / r.steps;
}

}  // namespace dtsim::train
