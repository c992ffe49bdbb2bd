// Small models and helpers shared by the train tests: configs that train in milliseconds,
// the tolerances every comparison states, and the static memory of a rank.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <ostream>

#include "model/memory.h"
#include "train/config.h"
#include "train/result.h"

namespace dtsim::train {

// fp32: the brief's rtol; atol covers parameters that pass through zero.
inline constexpr double kFp32Rtol = 1e-5, kFp32Atol = 1e-6;
// bf16 keeps 8 significant bits: one rounding step is 2^-8 of the value (0.4%), and a
// different summation order can round a weight or gradient one bf16 step the other way.
// Allow two steps relative, and an absolute 2e-3 (a step of a weight of size 0.25).
inline constexpr double kBf16Rtol = 2.0 / 256, kBf16Atol = 2e-3;

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

// Calls of one collective kind per step on rank `rank`.
inline double calls_per_step(const RunResult& r, OpKind op, int rank = 0) {
  return static_cast<double>(r.ranks[rank].counters[op].calls) / r.steps;
}

}  // namespace dtsim::train
