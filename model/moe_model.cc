#include "model/moe_model.h"

#include <algorithm>

#include "model/check.h"
#include "model/kernels.h"

namespace dtsim::model {

ParamLayout moe_model_layout(const MoeModelConfig& c) {
  const MoeConfig& m = c.moe;
  DTSIM_CHECK(c.input_dim > 0 && c.num_classes > 1 && m.d_model > 0 && m.num_experts > 0);
  ParamLayout layout;
  layout.begin_layer("embed");
  layout.add("embed.w", m.d_model, c.input_dim);
  layout.add("embed.b", m.d_model, 1);
  layout.begin_layer("moe");
  layout.add("moe.router", m.num_experts, m.d_model);
  for (int e = 0; e < m.num_experts; ++e) {
    const std::string p = "moe.expert" + std::to_string(e);
    layout.add(p + ".w1", m.d_ff, m.d_model);
    layout.add(p + ".b1", m.d_ff, 1);
    layout.add(p + ".w2", m.d_model, m.d_ff);
    layout.add(p + ".b2", m.d_model, 1);
  }
  layout.begin_layer("head");
  layout.add("head.w", c.num_classes, m.d_model);
  layout.add("head.b", c.num_classes, 1);
  return layout;
}

MoeModel::MoeModel(const MoeModelConfig& config, uint64_t seed, Precision precision)
    : config_(config), store_(moe_model_layout(config), precision, &ledger_), moe_(config.moe) {
  DTSIM_CHECK(store_.layout().layer_range(kMoeLayer).size() == moe_layer_size(config.moe));
  store_.set_params(init_params(store_.layout(), seed));
}

void MoeModel::ensure_batch(int batch) {
  DTSIM_CHECK(batch > 0);
  if (batch == batch_) return;
  batch_ = batch;
  const size_t b = batch, D = config_.moe.d_model, C = config_.num_classes;
  auto make = [&](size_t n) {
    return TrackedBuffer<float>(&ledger_, MemoryCategory::kActivations, n);
  };
  x_ = make(b * config_.input_dim);
  z_ = make(b * D);
  h_ = make(b * D);
  logits_ = make(b * C);
  probs_ = make(b * C);
  dlogits_ = make(b * C);
  dh_ = make(b * D);
  dz_ = make(b * D);
}

void MoeModel::run_forward(std::span<const float> x, int batch, LayerHooks* hooks) {
  const int Din = config_.input_dim, D = config_.moe.d_model, C = config_.num_classes;
  DTSIM_CHECK(x.size() == size_t(batch) * Din);
  ensure_batch(batch);
  std::copy(x.begin(), x.end(), x_.data());

  if (hooks) hooks->before_forward(kEmbedLayer);
  std::span<const float> pe = store_.layer_params(kEmbedLayer);
  linear_forward(x_.span(), pe.first(size_t(D) * Din), pe.subspan(size_t(D) * Din, D), z_.span(),
                 batch, Din, D);
  if (hooks) hooks->after_forward(kEmbedLayer);

  if (hooks) hooks->before_forward(kMoeLayer);
  aux_loss_ = moe_.forward(store_.layer_params(kMoeLayer), z_.span(), batch, h_.span());
  if (hooks) hooks->after_forward(kMoeLayer);
  const int64_t moe_bytes = static_cast<int64_t>(moe_.activation_bytes());
  ledger_.add(MemoryCategory::kActivations, moe_bytes - moe_bytes_recorded_);
  moe_bytes_recorded_ = moe_bytes;

  if (hooks) hooks->before_forward(kHeadLayer);
  std::span<const float> ph = store_.layer_params(kHeadLayer);
  linear_forward(h_.span(), ph.first(size_t(C) * D), ph.subspan(size_t(C) * D, C), logits_.span(),
                 batch, D, C);
  if (hooks) hooks->after_forward(kHeadLayer);
}

void MoeModel::forward(std::span<const float> x, int batch, std::span<float> logits) {
  run_forward(x, batch, nullptr);
  DTSIM_CHECK(logits.size() >= logits_.size());
  std::copy(logits_.data(), logits_.data() + logits_.size(), logits.data());
}

float MoeModel::forward_backward(std::span<const float> x, std::span<const int32_t> labels,
                                 int batch, float grad_scale, LayerHooks* hooks) {
  const int Din = config_.input_dim, D = config_.moe.d_model, C = config_.num_classes;
  DTSIM_CHECK(labels.size() == size_t(batch));
  run_forward(x, batch, hooks);
  const float loss = softmax_cross_entropy_forward(logits_.span(), labels, probs_.span(), batch, C);
  std::fill(dlogits_.data(), dlogits_.data() + dlogits_.size(), 0.0f);
  softmax_cross_entropy_backward(probs_.span(), labels, batch, C, grad_scale, dlogits_.span());

  if (hooks) hooks->before_backward(kHeadLayer);
  {
    std::span<const float> p = store_.layer_params(kHeadLayer);
    std::span<float> g = store_.begin_layer_grads(kHeadLayer);
    std::fill(dh_.data(), dh_.data() + dh_.size(), 0.0f);
    linear_backward(dlogits_.span(), h_.span(), p.first(size_t(C) * D), dh_.span(),
                    g.first(size_t(C) * D), g.subspan(size_t(C) * D, C), batch, D, C);
    store_.end_layer_grads(kHeadLayer);
  }
  if (hooks) hooks->after_backward(kHeadLayer);

  if (hooks) hooks->before_backward(kMoeLayer);
  {
    std::span<const float> p = store_.layer_params(kMoeLayer);
    std::span<float> g = store_.begin_layer_grads(kMoeLayer);
    std::fill(dz_.data(), dz_.data() + dz_.size(), 0.0f);
    moe_.backward(p, dh_.span(), grad_scale * static_cast<float>(batch), g, dz_.span());
    store_.end_layer_grads(kMoeLayer);
  }
  if (hooks) hooks->after_backward(kMoeLayer);

  if (hooks) hooks->before_backward(kEmbedLayer);
  {
    std::span<const float> p = store_.layer_params(kEmbedLayer);
    std::span<float> g = store_.begin_layer_grads(kEmbedLayer);
    linear_backward(dz_.span(), x_.span(), p.first(size_t(D) * Din), {}, g.first(size_t(D) * Din),
                    g.subspan(size_t(D) * Din, D), batch, Din, D);
    store_.end_layer_grads(kEmbedLayer);
  }
  if (hooks) hooks->after_backward(kEmbedLayer);
  return loss;
}

}  // namespace dtsim::model
