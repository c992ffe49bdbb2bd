// Trainee: one rank's part of the model a config names (MLP regression or MoE classification)
// as a LayerStack of layers, with its loss and its synthetic task, behind one interface, so
// a strategy is written once for both models. The layers are the whole model's (DDP, ZeRO,
// the references) or replacements that hold a slice of it (tensor- and expert-parallel
// layers, train/tensor_parallel/ and train/expert_parallel/); either way the parameters
// start as the slices of the full model's seeded initial values (the same bits as the
// single-rank model). Sample i of step s comes from (seed, s, i), so every rank generates
// exactly its own slice.
//
// Thread safety: none; each rank builds its own Trainee.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "model/data.h"
#include "model/hooks.h"
#include "model/layer_stack.h"
#include "model/param_store.h"
#include "train/config.h"

namespace dtsim::train {

// The whole model's layers for `config` (mlp or moe).
model::Layers model_layers(const TrainConfig& config);

// A pipeline chunk's layers: [first, last) of the model's L pipeline layers (the MLP's
// blocks, L = config.mlp.num_blocks), with the head appended when last == L. MLP only.
model::Layers pipeline_layers(const TrainConfig& config, int first, int last);

class Trainee {
 public:
  // The whole model (seeded from config.seed, same bits on every rank) and its task.
  explicit Trainee(const TrainConfig& config);
  // A rank's own layers (each tensor a TensorShard of the full model's tensor of the same
  // name); `copy_input` as LayerStack's.
  Trainee(const TrainConfig& config, model::Layers layers, bool copy_input = true);
  Trainee(const Trainee&) = delete;
  Trainee& operator=(const Trainee&) = delete;

  model::LayerStack& stack() { return stack_; }
  model::ParamStore& store() { return stack_.store(); }
  model::MemoryLedger& memory() { return stack_.memory(); }

  // Forward and backward on samples [first, first + count) of step `step`; gradients
  // accumulate grad_scale * d(sum of per-sample losses), or are overwritten with it when
  // `write_grads` (bitwise zero_grad then accumulate). Returns the mean loss of the slice.
  float forward_backward(int64_t step, int first, int count, float grad_scale,
                         model::LayerHooks* hooks = nullptr, bool write_grads = false);
  // The same with the SGD step `u` applied inside backward (model::LayerStack::backward_sgd,
  // the stack's fuses_sgd()): parameters updated, gradients not written.
  float forward_backward_sgd(int64_t step, int first, int count, float grad_scale,
                             model::LayerHooks* hooks, const model::SgdUpdate& u);

  // Generates samples [first, first + count) of step `step`: returns their inputs (count,
  // D_in), valid until the next call; targets() holds their targets.
  std::span<const float> load_batch(int64_t step, int first, int count);
  model::Targets targets() const { return {.values = y_, .labels = labels_}; }
  // The loss on the stack's output.
  model::Loss& loss() { return *loss_; }

 private:
  // forward_backward's body; backward_sgd instead of backward when `sgd` is given.
  float run(int64_t step, int first, int count, float grad_scale, model::LayerHooks* hooks,
            bool write_grads, const model::SgdUpdate* sgd);

  const TrainConfig& config_;
  model::LayerStack stack_;
  std::unique_ptr<model::Loss> loss_;
  std::unique_ptr<model::RegressionTask> regression_;
  std::unique_ptr<model::ClassificationTask> classification_;
  std::vector<float> x_;         // (count, D) inputs of the current slice
  std::vector<float> y_;         // (count, O) regression targets
  std::vector<int32_t> labels_;  // (count) class labels
};

// The seed of the synthetic task, derived from the config's seed (distinct from the model's).
inline uint64_t task_seed(const TrainConfig& config) { return config.seed * 7919 + 17; }

}  // namespace dtsim::train
