#include "train/trainee.h"

#include <iterator>
#include <utility>

#include "runtime/types.h"

namespace dtsim::train {

model::Layers model_layers(const TrainConfig& config) {
  return model_spec(config).layers(config, MeshShape{}, MeshCoord{}, {});
}

model::Layers pipeline_layers(const TrainConfig& config, int first, int last) {
  const ModelSpec& spec = model_spec(config);
  const int lead = spec.lead_layers(), L = spec.pipeline_blocks(config);
  const int per = spec.layers_per_block(), tail = spec.tail_layers();
  if (first < 0 || first >= last || last > L) {
    throw UsageError("pipeline_layers: [" + std::to_string(first) + ", " + std::to_string(last) +
                     ") is not a range of the model's " + std::to_string(L) + " blocks");
  }
  // Block b is layers lead + per b ...; chunk 0 keeps the lead layers, the last one the tail.
  const int begin = first == 0 ? 0 : lead + per * first,
            end = lead + per * last + (last == L ? tail : 0);
  model::Layers all = model_layers(config);
  return model::Layers(std::make_move_iterator(all.begin() + begin),
                       std::make_move_iterator(all.begin() + end));
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
  objective_ = model_spec(config).objective(config, &stack_.memory());
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
  const float loss = objective_->loss().forward_backward(y, targets(), count, grad_scale, dy);
  const model::BackwardScale scale{grad_scale, count, write_grads};
  if (sgd != nullptr) {
    stack_.backward_sgd(0, dy, scale, *sgd, hooks);
  } else {
    stack_.backward(0, dy, scale, hooks);
  }
  return loss;
}

}  // namespace dtsim::train
