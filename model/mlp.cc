#include "model/mlp.h"

#include <algorithm>

#include "model/check.h"
#include "model/mlp_layers.h"

namespace dtsim::model {

Layers mlp_layers(const MlpConfig& c, int first, int last) {
  DTSIM_CHECK(c.input_dim > 0 && c.hidden_dim > 0 && c.num_blocks >= 0 && c.output_dim > 0);
  DTSIM_CHECK(0 <= first && first < last && last <= c.num_blocks + 1);
  Layers layers;
  for (int l = first; l < last; ++l) {
    if (l < c.num_blocks) {
      layers.push_back(
          std::make_unique<MlpBlock>("block" + std::to_string(l), c.input_dim, c.hidden_dim));
    } else {
      layers.push_back(std::make_unique<Linear>("head", c.input_dim, c.output_dim));
    }
  }
  return layers;
}

ParamLayout mlp_layout(const MlpConfig& c) { return layout_of(mlp_layers(c, 0, c.num_blocks + 1)); }

MlpModel::MlpModel(const MlpConfig& config, uint64_t seed, Precision precision)
    : config_(config),
      stack_(mlp_layers(config, 0, config.num_blocks + 1), precision),
      loss_(config.output_dim) {
  store().set_params(init_params(layout(), seed));
}

void MlpModel::forward(std::span<const float> x, int batch, std::span<float> y) {
  std::span<const float> out = stack_.forward(0, x, batch);
  DTSIM_CHECK(y.size() >= out.size());
  std::copy(out.begin(), out.end(), y.begin());
}

float MlpModel::forward_backward(std::span<const float> x, std::span<const float> targets,
                                 int batch, float grad_scale, LayerHooks* hooks) {
  return run(x, targets, batch, grad_scale, hooks, false);
}

float MlpModel::forward_backward_overwrite(std::span<const float> x, std::span<const float> targets,
                                           int batch, float grad_scale, LayerHooks* hooks) {
  return run(x, targets, batch, grad_scale, hooks, true);
}

float MlpModel::forward_backward_sgd(std::span<const float> x, std::span<const float> targets,
                                     int batch, float grad_scale, const SgdUpdate& u) {
  return run(x, targets, batch, grad_scale, nullptr, true, &u);
}

float MlpModel::run(std::span<const float> x, std::span<const float> targets, int batch,
                    float grad_scale, LayerHooks* hooks, bool write_grads, const SgdUpdate* sgd) {
  DTSIM_CHECK(targets.size() == size_t(batch) * config_.output_dim);
  std::span<const float> y = stack_.forward(0, x, batch, hooks);
  std::span<float> dy = stack_.loss_grad(batch);
  const float loss =
      loss_.forward_backward(y, {.values = targets, .labels = {}}, batch, grad_scale, dy);
  const BackwardScale scale{grad_scale, batch, write_grads};
  if (sgd != nullptr) {
    stack_.backward_sgd(0, dy, scale, *sgd, hooks);
  } else {
    stack_.backward(0, dy, scale, hooks);
  }
  return loss;
}

}  // namespace dtsim::model
