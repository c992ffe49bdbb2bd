// Trainee: the model a config names (MLP regression or MoE classification) together with its
// synthetic task, behind one interface, so that a strategy is written once for both. Sample
// i of step s comes from (seed, s, i), so every rank generates exactly its own slice.
//
// Thread safety: none; each rank builds its own Trainee.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "model/data.h"
#include "model/hooks.h"
#include "model/mlp.h"
#include "model/moe_model.h"
#include "model/param_store.h"
#include "train/config.h"

namespace dtsim::train {

class Trainee {
 public:
  // Builds the model (seeded from config.seed, same bits on every rank) and its task.
  explicit Trainee(const TrainConfig& config);
  Trainee(const Trainee&) = delete;
  Trainee& operator=(const Trainee&) = delete;

  model::ParamStore& store();
  model::MemoryLedger& memory();

  // Forward and backward on samples [first, first + count) of step `step`; gradients
  // accumulate grad_scale * d(sum of per-sample losses). Returns the mean loss of the slice.
  float forward_backward(int64_t step, int first, int count, float grad_scale,
                         model::LayerHooks* hooks = nullptr);

 private:
  void ensure(int count);

  std::unique_ptr<model::MlpModel> mlp_;
  std::unique_ptr<model::MoeModel> moe_;
  std::unique_ptr<model::RegressionTask> regression_;
  std::unique_ptr<model::ClassificationTask> classification_;
  std::vector<float> x_;         // (count, D) inputs of the current slice
  std::vector<float> y_;         // (count, O) regression targets
  std::vector<int32_t> labels_;  // (count) class labels
};

// The seed of the synthetic task, derived from the config's seed (distinct from the model's).
inline uint64_t task_seed(const TrainConfig& config) { return config.seed * 7919 + 17; }

}  // namespace dtsim::train
