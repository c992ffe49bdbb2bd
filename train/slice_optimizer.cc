#include "train/slice_optimizer.h"

namespace dtsim::train {
namespace {

model::SgdConfig sgd_config(const TrainConfig& c) {
  model::SgdConfig s;
  s.lr = c.lr;
  s.momentum = c.optimizer == model::OptimizerKind::kSgdMomentum ? 0.9f : 0.0f;
  return s;
}

model::AdamConfig adam_config(const TrainConfig& c) {
  model::AdamConfig a;
  a.lr = c.lr;
  return a;
}

}  // namespace

SliceOptimizer::SliceOptimizer(const TrainConfig& config, size_t n, model::MemoryLedger* ledger)
    : n_(n), lr_(config.lr) {
  if (config.optimizer == model::OptimizerKind::kAdam) {
    adam_ = std::make_unique<model::Adam>(adam_config(config), n, ledger);
  } else {
    sgd_ = std::make_unique<model::Sgd>(sgd_config(config), n, ledger);
  }
}

SliceOptimizer::SliceOptimizer(const TrainConfig& config, std::span<const BFloat16> params,
                               model::MemoryLedger* ledger)
    : n_(params.size()), lr_(config.lr) {
  if (config.optimizer == model::OptimizerKind::kAdam) {
    adam_ = std::make_unique<model::Adam>(adam_config(config), params, ledger);
  } else {
    sgd_ = std::make_unique<model::Sgd>(sgd_config(config), params, ledger);
  }
}

std::vector<float> SliceOptimizer::step_sizes() const {
  std::vector<float> out(n_, lr_);
  if (adam_) adam_->step_sizes(out);
  return out;
}

void SliceOptimizer::step(std::span<float> params, std::span<const float> grads) {
  if (adam_) {
    adam_->step(params, grads);
  } else {
    sgd_->step(params, grads);
  }
}

void SliceOptimizer::step(std::span<BFloat16> params, std::span<const BFloat16> grads) {
  if (adam_) {
    adam_->step(params, grads);
  } else {
    sgd_->step(params, grads);
  }
}

std::vector<SliceOptimizer::NamedState> SliceOptimizer::state() {
  std::vector<NamedState> out;
  const auto add = [&out](const char* name, std::span<float> data) {
    if (!data.empty()) out.push_back({name, data});
  };
  if (adam_) {
    add("master", adam_->mutable_master());
    add("adam_m", adam_->mutable_m());
    add("adam_v", adam_->mutable_v());
  } else {
    add("master", sgd_->mutable_master());
    add("momentum", sgd_->mutable_momentum());
  }
  return out;
}

void SliceOptimizer::set_steps(int64_t steps) {
  if (adam_) {
    adam_->set_steps(steps);
  } else {
    sgd_->set_steps(steps);
  }
}

}  // namespace dtsim::train
