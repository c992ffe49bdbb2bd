// Trainee: one rank's part of the model a config names (its ModelSpec, train/models/) as a
// LayerStack of layers, with its loss and its synthetic task, behind one interface, so a
// strategy is written once for every model. The layers are the whole model's (DDP, ZeRO,
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

#include "model/hooks.h"
#include "model/layer_stack.h"
#include "model/param_store.h"
#include "train/config.h"
#include "train/models/model_spec.h"

namespace dtsim::train {

// The whole model's layers for `config` (mlp or moe).
model::Layers model_layers(const TrainConfig& config);

// A pipeline chunk's layers: blocks [first, last) of the model's L (ModelSpec::
// pipeline_blocks), with the lead layers (an embedding) when first == 0 and the head when
// last == L.
model::Layers pipeline_layers(const TrainConfig& config, int first, int last);

class Trainee {
 public:
  // The whole model (seeded from config.seed, same bits on every rank) and its task.
  explicit Trainee(const TrainConfig& config);
  // A rank's own layers (each tensor a TensorShard of the full model's tensor of the same
  // name); `copy_input` as LayerStack's.
  // `shape`, `at`: the rank's place on the mesh, for its objective (ModelSpec::rank_objective).
  Trainee(const TrainConfig& config, model::Layers layers, bool copy_input = true,
          const MeshShape& shape = {}, const MeshCoord& at = {});
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
  std::span<const float> load_batch(int64_t step, int first, int count) {
    return objective_->load_batch(step, first, count);
  }
  model::Targets targets() const { return objective_->targets(); }
  // The loss on the stack's output.
  model::Loss& loss() { return objective_->loss(); }

 private:
  // forward_backward's body; backward_sgd instead of backward when `sgd` is given.
  float run(int64_t step, int first, int count, float grad_scale, model::LayerHooks* hooks,
            bool write_grads, const model::SgdUpdate* sgd);

  const TrainConfig& config_;
  model::LayerStack stack_;
  std::unique_ptr<Objective> objective_;  // the model's loss and task
};

}  // namespace dtsim::train
