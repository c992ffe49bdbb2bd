#include "model/moe_model.h"

#include <algorithm>

#include "model/check.h"
#include "model/mlp_layers.h"

namespace dtsim::model {

std::string moe_block_name(int l, int num_blocks) {
  return num_blocks == 1 ? "moe" : "moe" + std::to_string(l);
}

Layers moe_model_layers(const MoeModelConfig& c, const ExpertSharding& sharding) {
  const MoeConfig& m = c.moe;
  DTSIM_CHECK(c.input_dim > 0 && c.num_classes > 1 && m.d_model > 0 && m.num_experts > 0 &&
              c.num_blocks > 0);
  Layers layers;
  layers.push_back(std::make_unique<Linear>("embed", c.input_dim, m.d_model));
  for (int l = 0; l < c.num_blocks; ++l) {
    layers.push_back(std::make_unique<MoeBlock>(m, moe_block_name(l, c.num_blocks), sharding));
  }
  layers.push_back(std::make_unique<Linear>("head", m.d_model, c.num_classes));
  return layers;
}

ParamLayout moe_model_layout(const MoeModelConfig& c) { return layout_of(moe_model_layers(c)); }

MoeModel::MoeModel(const MoeModelConfig& config, uint64_t seed, Precision precision)
    : config_(config),
      stack_(moe_model_layers(config), precision),
      loss_(config.num_classes, &stack_.memory()) {
  DTSIM_CHECK(layout().layer_range(kMoeLayer).size() == moe_layer_size(config.moe));
  store().set_params(init_params(layout(), seed));
}

void MoeModel::forward(std::span<const float> x, int batch, std::span<float> logits) {
  std::span<const float> out = stack_.forward(0, x, batch);
  DTSIM_CHECK(logits.size() >= out.size());
  std::copy(out.begin(), out.end(), logits.begin());
}

float MoeModel::forward_backward(std::span<const float> x, std::span<const int32_t> labels,
                                 int batch, float grad_scale, LayerHooks* hooks) {
  DTSIM_CHECK(labels.size() == size_t(batch));
  std::span<const float> y = stack_.forward(0, x, batch, hooks);
  std::span<float> dy = stack_.loss_grad(batch);
  const float loss =
      loss_.forward_backward(y, {.values = {}, .labels = labels}, batch, grad_scale, dy);
  stack_.backward(0, dy, {grad_scale, batch}, hooks);
  return loss;
}

}  // namespace dtsim::model
