#include "model/mlp.h"

#include <algorithm>

#include "model/check.h"
#include "model/kernels.h"

namespace dtsim::model {
namespace {

// Offsets of one block's tensors relative to the start of its layer.
struct BlockOffsets {
  size_t w1, b1, w2, b2;
};

BlockOffsets block_offsets(const MlpConfig& c) {
  const size_t hd = size_t(c.hidden_dim) * c.input_dim;
  return {0, hd, hd + c.hidden_dim, 2 * hd + c.hidden_dim};
}

}  // namespace

ParamLayout mlp_layout(const MlpConfig& c) {
  DTSIM_CHECK(c.input_dim > 0 && c.hidden_dim > 0 && c.num_blocks >= 0 && c.output_dim > 0);
  ParamLayout layout;
  for (int l = 0; l < c.num_blocks; ++l) {
    const std::string p = "block" + std::to_string(l);
    layout.begin_layer(p);
    layout.add(p + ".w1", c.hidden_dim, c.input_dim);
    layout.add(p + ".b1", c.hidden_dim, 1);
    layout.add(p + ".w2", c.input_dim, c.hidden_dim);
    layout.add(p + ".b2", c.input_dim, 1);
  }
  layout.begin_layer("head");
  layout.add("head.w", c.output_dim, c.input_dim);
  layout.add("head.b", c.output_dim, 1);
  return layout;
}

MlpModel::MlpModel(const MlpConfig& config, uint64_t seed, Precision precision)
    : config_(config), store_(mlp_layout(config), precision, &ledger_) {
  store_.set_params(init_params(store_.layout(), seed));
}

void MlpModel::ensure_batch(int batch) {
  DTSIM_CHECK(batch > 0);
  if (batch == batch_) return;
  batch_ = batch;
  const size_t b = batch;
  const size_t D = config_.input_dim, H = config_.hidden_dim, O = config_.output_dim;
  const size_t L = config_.num_blocks;
  auto make = [&](size_t n) {
    return TrackedBuffer<float>(&ledger_, MemoryCategory::kActivations, n);
  };
  xs_ = make((L + 1) * b * D);
  pre_ = make(L * b * H);
  hid_ = make(L * b * H);
  out_ = make(b * O);
  dx_ = make(b * D);
  dh_ = make(b * H);
  dp_ = make(b * H);
  dout_ = make(b * O);
}

void MlpModel::run_forward(std::span<const float> x, int batch, LayerHooks* hooks) {
  const int D = config_.input_dim, H = config_.hidden_dim, O = config_.output_dim;
  const int L = config_.num_blocks;
  DTSIM_CHECK(x.size() == size_t(batch) * D);
  ensure_batch(batch);
  const size_t bd = size_t(batch) * D, bh = size_t(batch) * H;
  // The input is copied so every kernel reads model-owned buffers with the same alignment.
  std::copy(x.begin(), x.end(), xs_.data());
  const BlockOffsets o = block_offsets(config_);
  for (int l = 0; l < L; ++l) {
    if (hooks) hooks->before_forward(l);
    std::span<const float> p = store_.layer_params(l);
    auto x_in = xs_.span().subspan(l * bd, bd);
    auto x_out = xs_.span().subspan((l + 1) * bd, bd);
    auto pre = pre_.span().subspan(l * bh, bh);
    auto hid = hid_.span().subspan(l * bh, bh);
    linear_forward(x_in, p.subspan(o.w1, size_t(H) * D), p.subspan(o.b1, H), pre, batch, D, H);
    gelu_forward(pre, hid);
    linear_forward(hid, p.subspan(o.w2, size_t(D) * H), p.subspan(o.b2, D), x_out, batch, H, D);
    for (size_t i = 0; i < bd; ++i) x_out[i] += x_in[i];  // residual
    if (hooks) hooks->after_forward(l);
  }
  if (hooks) hooks->before_forward(L);
  std::span<const float> p = store_.layer_params(L);
  linear_forward(xs_.span().subspan(L * bd, bd), p.first(size_t(O) * D),
                 p.subspan(size_t(O) * D, O), out_.span(), batch, D, O);
  if (hooks) hooks->after_forward(L);
}

void MlpModel::forward(std::span<const float> x, int batch, std::span<float> y) {
  run_forward(x, batch, nullptr);
  DTSIM_CHECK(y.size() >= out_.size());
  std::copy(out_.data(), out_.data() + out_.size(), y.data());
}

float MlpModel::forward_backward(std::span<const float> x, std::span<const float> targets,
                                 int batch, float grad_scale, LayerHooks* hooks) {
  const int D = config_.input_dim, H = config_.hidden_dim, O = config_.output_dim;
  const int L = config_.num_blocks;
  DTSIM_CHECK(targets.size() == size_t(batch) * O);
  run_forward(x, batch, hooks);
  const float loss = mse_loss_forward(out_.span(), targets, batch, O);
  const size_t bd = size_t(batch) * D, bh = size_t(batch) * H;

  std::fill(dout_.data(), dout_.data() + dout_.size(), 0.0f);
  mse_loss_backward(out_.span(), targets, batch, O, grad_scale, dout_.span());

  // Head: dx = dout * Wo (dx_ starts at zero), dWo += dout^T x_L, dbo += sum dout.
  if (hooks) hooks->before_backward(L);
  {
    std::span<const float> p = store_.layer_params(L);
    std::span<float> g = store_.begin_layer_grads(L);
    std::fill(dx_.data(), dx_.data() + dx_.size(), 0.0f);
    linear_backward(dout_.span(), xs_.span().subspan(L * bd, bd), p.first(size_t(O) * D),
                    dx_.span(), g.first(size_t(O) * D), g.subspan(size_t(O) * D, O), batch, D, O);
    store_.end_layer_grads(L);
  }
  if (hooks) hooks->after_backward(L);

  // Blocks, last to first. dx_ holds dL/dx_{l+1}; the residual makes it also the first term
  // of dL/dx_l, and the block's own contribution is accumulated on top of it.
  const BlockOffsets o = block_offsets(config_);
  for (int l = L - 1; l >= 0; --l) {
    if (hooks) hooks->before_backward(l);
    std::span<const float> p = store_.layer_params(l);
    std::span<float> g = store_.begin_layer_grads(l);
    auto x_in = xs_.span().subspan(l * bd, bd);
    auto pre = pre_.span().subspan(l * bh, bh);
    auto hid = hid_.span().subspan(l * bh, bh);
    std::fill(dh_.data(), dh_.data() + dh_.size(), 0.0f);
    std::fill(dp_.data(), dp_.data() + dp_.size(), 0.0f);
    linear_backward(dx_.span(), hid, p.subspan(o.w2, size_t(D) * H), dh_.span(),
                    g.subspan(o.w2, size_t(D) * H), g.subspan(o.b2, D), batch, H, D);
    gelu_backward(pre, dh_.span(), dp_.span());
    // The input's gradient is not needed below block 0.
    std::span<float> dx_in = l > 0 ? dx_.span() : std::span<float>();
    linear_backward(dp_.span(), x_in, p.subspan(o.w1, size_t(H) * D), dx_in,
                    g.subspan(o.w1, size_t(H) * D), g.subspan(o.b1, H), batch, D, H);
    store_.end_layer_grads(l);
    if (hooks) hooks->after_backward(l);
  }
  return loss;
}

}  // namespace dtsim::model
