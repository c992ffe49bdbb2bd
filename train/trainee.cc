#include "train/trainee.h"

#include <utility>

#include "model/mlp.h"
#include "model/moe_model.h"
#include "runtime/types.h"

namespace dtsim::train {

model::Layers model_layers(const TrainConfig& config) {
  if (config.model == ModelKind::kMlp) {
    return model::mlp_layers(config.mlp, 0, config.mlp.num_blocks + 1);
  }
  return model::moe_model_layers(config.moe);
}

model::Layers pipeline_layers(const TrainConfig& config, int first, int last) {
  const int L = config.mlp.num_blocks;
  if (config.model != ModelKind::kMlp || first < 0 || first >= last || last > L) {
    throw UsageError("pipeline_layers: [" + std::to_string(first) + ", " + std::to_string(last) +
                     ") is not a range of the MLP's " + std::to_string(L) + " blocks");
  }
  return model::mlp_layers(config.mlp, first, last == L ? L + 1 : last);
}

Trainee::Trainee(const TrainConfig& config) : Trainee(config, model_layers(config)) {}

Trainee::Trainee(const TrainConfig& config, model::Layers layers, bool copy_input)
    : config_(config), stack_(std::move(layers), config.precision, copy_input, config.recompute) {
  const model::ParamLayout full = model_layout(config);
  const std::vector<float> init = model::init_params(full, config.seed);  // the model's bits
  std::vector<float> mine(stack_.layout().size());
  for (const model::ParamSlice& s : model::slices_into(stack_.layout(), full)) {
    std::copy_n(init.begin() + s.full, s.count, mine.begin() + s.local);
  }
  stack_.store().set_params(mine);
  if (config.model == ModelKind::kMlp) {
    loss_ = std::make_unique<model::MseLoss>(config.mlp.output_dim);
    regression_ = std::make_unique<model::RegressionTask>(config.mlp.input_dim,
                                                          config.mlp.output_dim, task_seed(config));
  } else {
    loss_ = std::make_unique<model::CrossEntropyLoss>(config.moe.num_classes, &stack_.memory());
    classification_ = std::make_unique<model::ClassificationTask>(
        config.moe.input_dim, config.moe.num_classes, task_seed(config));
  }
}

std::span<const float> Trainee::load_batch(int64_t step, int first, int count) {
  if (regression_) {
    x_.resize(static_cast<size_t>(count) * config_.mlp.input_dim);
    y_.resize(static_cast<size_t>(count) * config_.mlp.output_dim);
    regression_->batch(step, first, count, x_, y_);
  } else {
    x_.resize(static_cast<size_t>(count) * config_.moe.input_dim);
    labels_.resize(count);
    classification_->batch(step, first, count, x_, labels_);
  }
  return x_;
}

float Trainee::forward_backward(int64_t step, int first, int count, float grad_scale,
                                model::LayerHooks* hooks, bool write_grads) {
  return run(step, first, count, grad_scale, hooks, write_grads, nullptr);
}

float Trainee::forward_backward_sgd(int64_t step, int first, int count, float grad_scale,
                                    model::LayerHooks* hooks, const model::SgdUpdate& u) {
  return run(step, first, count, grad_scale, hooks, true, &u);
}

float Trainee::run(int64_t step, int first, int count, float grad_scale, model::LayerHooks* hooks,
                   bool write_grads, const model::SgdUpdate* sgd) {
  std::span<const float> x = load_batch(step, first, count);
  std::span<const float> y = stack_.forward(0, x, count, hooks);
  std::span<float> dy = stack_.loss_grad(count);
  const float loss = loss_->forward_backward(y, targets(), count, grad_scale, dy);
  const model::BackwardScale scale{grad_scale, count, write_grads};
  if (sgd != nullptr) {
    stack_.backward_sgd(0, dy, scale, *sgd, hooks);
  } else {
    stack_.backward(0, dy, scale, hooks);
  }
  return loss;
}

}  // namespace dtsim::train
