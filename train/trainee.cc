#include "train/trainee.h"

namespace dtsim::train {

Trainee::Trainee(const TrainConfig& config) {
  if (config.model == ModelKind::kMlp) {
    mlp_ = std::make_unique<model::MlpModel>(config.mlp, config.seed, config.precision);
    regression_ = std::make_unique<model::RegressionTask>(config.mlp.input_dim,
                                                          config.mlp.output_dim, task_seed(config));
  } else {
    moe_ = std::make_unique<model::MoeModel>(config.moe, config.seed, config.precision);
    classification_ = std::make_unique<model::ClassificationTask>(
        config.moe.input_dim, config.moe.num_classes, task_seed(config));
  }
}

model::ParamStore& Trainee::store() { return mlp_ ? mlp_->store() : moe_->store(); }

model::MemoryLedger& Trainee::memory() { return mlp_ ? mlp_->memory() : moe_->memory(); }

void Trainee::ensure(int count) {
  if (mlp_) {
    x_.resize(static_cast<size_t>(count) * mlp_->config().input_dim);
    y_.resize(static_cast<size_t>(count) * mlp_->config().output_dim);
  } else {
    x_.resize(static_cast<size_t>(count) * moe_->config().input_dim);
    labels_.resize(count);
  }
}

float Trainee::forward_backward(int64_t step, int first, int count, float grad_scale,
                                model::LayerHooks* hooks) {
  ensure(count);
  if (mlp_) {
    regression_->batch(step, first, count, x_, y_);
    return mlp_->forward_backward(x_, y_, count, grad_scale, hooks);
  }
  classification_->batch(step, first, count, x_, labels_);
  return moe_->forward_backward(x_, labels_, count, grad_scale, hooks);
}

}  // namespace dtsim::train
