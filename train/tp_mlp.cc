#include "train/tp_mlp.h"

#include <algorithm>
#include <string>

#include "model/check.h"
#include "model/kernels.h"

namespace dtsim::train {
namespace {

using model::MemoryCategory;
using model::TrackedBuffer;

// Offsets of one shard block's tensors relative to the start of its layer.
struct BlockOffsets {
  size_t w1, b1, w2, b2;
};

BlockOffsets block_offsets(int input_dim, int local_hidden) {
  const size_t hd = size_t(local_hidden) * input_dim;
  return {0, hd, hd + local_hidden, 2 * hd + local_hidden};
}

}  // namespace

model::ParamLayout tp_mlp_layout(const model::MlpConfig& c, int tp_size) {
  DTSIM_CHECK(tp_size >= 1 && c.hidden_dim % tp_size == 0);
  const int h = c.hidden_dim / tp_size;
  model::ParamLayout layout;
  for (int l = 0; l < c.num_blocks; ++l) {
    const std::string p = "block" + std::to_string(l);
    layout.begin_layer(p);
    layout.add(p + ".w1", h, c.input_dim);
    layout.add(p + ".b1", h, 1);
    layout.add(p + ".w2", c.input_dim, h);
    layout.add(p + ".b2", c.input_dim, 1);
  }
  layout.begin_layer("head");
  layout.add("head.w", c.output_dim, c.input_dim);
  layout.add("head.b", c.output_dim, 1);
  return layout;
}

TpMlp::TpMlp(const model::MlpConfig& config, int tp_rank, int tp_size, model::Precision precision)
    : config_(config),
      local_hidden_(config.hidden_dim / tp_size),
      store_(tp_mlp_layout(config, tp_size), precision, &ledger_) {
  DTSIM_CHECK(tp_rank >= 0 && tp_rank < tp_size);
  slices_ = tp_mlp_slices(config, tp_rank, tp_size);
}

std::vector<ParamSlice> tp_mlp_slices(const model::MlpConfig& config, int tp_rank, int tp_size) {
  const model::ParamLayout full = model::mlp_layout(config);
  const model::ParamLayout local = tp_mlp_layout(config, tp_size);
  const size_t h0 = size_t(tp_rank) * (config.hidden_dim / tp_size);
  std::vector<ParamSlice> slices;
  for (const model::ParamView& v : local.views()) {
    const model::ParamView& f = full.view(v.name);
    const bool w1_or_b1 = v.name.ends_with(".w1") || v.name.ends_with(".b1");
    if (w1_or_b1) {  // column-parallel: rows [h0, h0 + H/T)
      slices.push_back({v.offset, f.offset + h0 * f.cols, v.size()});
    } else if (v.name.ends_with(".w2")) {  // row-parallel: columns [h0, h0 + H/T) of each row
      for (int row = 0; row < v.rows; ++row) {
        slices.push_back({v.offset + size_t(row) * v.cols, f.offset + size_t(row) * f.cols + h0,
                          size_t(v.cols)});
      }
    } else {  // b2 and the head: replicated
      slices.push_back({v.offset, f.offset, v.size()});
    }
  }
  return slices;
}

void TpMlp::load_full(std::span<const float> full) {
  DTSIM_CHECK(full.size() == model::mlp_layout(config_).size());
  std::vector<float> local(store_.size());
  for (const ParamSlice& s : slices_) {
    std::copy_n(full.begin() + s.full, s.count, local.begin() + s.local);
  }
  store_.set_params(local);
}

void TpMlp::scatter_to_full(std::span<const float> local, std::span<float> full) const {
  DTSIM_CHECK(local.size() == store_.size());
  for (const ParamSlice& s : slices_) {
    std::copy_n(local.begin() + s.local, s.count, full.begin() + s.full);
  }
}

void TpMlp::ensure_batch(int batch) {
  DTSIM_CHECK(batch > 0);
  if (batch == batch_) return;
  batch_ = batch;
  const size_t b = batch, D = config_.input_dim, H = local_hidden_, O = config_.output_dim;
  const size_t L = config_.num_blocks;
  auto make = [&](size_t n) {
    return TrackedBuffer<float>(&ledger_, MemoryCategory::kActivations, n);
  };
  xs_ = make((L + 1) * b * D);
  pre_ = make(L * b * H);
  hid_ = make(L * b * H);
  out_ = make(b * O);
  dx_ = make(b * D);
  dxp_ = make(b * D);
  dh_ = make(b * H);
  dp_ = make(b * H);
  dout_ = make(b * O);
}

void TpMlp::run_forward(std::span<const float> x, int batch, TracedComm& tp) {
  const int D = config_.input_dim, H = local_hidden_, O = config_.output_dim;
  const int L = config_.num_blocks;
  DTSIM_CHECK(x.size() == size_t(batch) * D);
  ensure_batch(batch);
  const size_t bd = size_t(batch) * D, bh = size_t(batch) * H;
  std::copy(x.begin(), x.end(), xs_.data());
  const BlockOffsets o = block_offsets(D, H);
  for (int l = 0; l < L; ++l) {
    std::span<const float> p = store_.layer_params(l);
    auto x_in = xs_.span().subspan(l * bd, bd);
    auto x_out = xs_.span().subspan((l + 1) * bd, bd);
    auto pre = pre_.span().subspan(l * bh, bh);
    auto hid = hid_.span().subspan(l * bh, bh);
    // Column-parallel W1 (+ local b1), local GELU, row-parallel W2 without its bias.
    model::linear_forward(x_in, p.subspan(o.w1, size_t(H) * D), p.subspan(o.b1, H), pre, batch, D,
                          H);
    model::gelu_forward(pre, hid);
    model::linear_forward(hid, p.subspan(o.w2, size_t(D) * H), {}, x_out, batch, H, D);
    tp.all_reduce(x_out);  // g: sum the partial block outputs
    std::span<const float> b2 = p.subspan(o.b2, D);
    for (int r = 0; r < batch; ++r) {
      float* row = x_out.data() + size_t(r) * D;
      const float* in = x_in.data() + size_t(r) * D;
      for (int d = 0; d < D; ++d) row[d] = row[d] + b2[d] + in[d];  // b2 once, then residual
    }
  }
  std::span<const float> p = store_.layer_params(L);
  model::linear_forward(xs_.span().subspan(L * bd, bd), p.first(size_t(O) * D),
                        p.subspan(size_t(O) * D, O), out_.span(), batch, D, O);
}

void TpMlp::forward(std::span<const float> x, int batch, std::span<float> y, TracedComm& tp) {
  run_forward(x, batch, tp);
  DTSIM_CHECK(y.size() >= out_.size());
  std::copy(out_.data(), out_.data() + out_.size(), y.data());
}

float TpMlp::forward_backward(std::span<const float> x, std::span<const float> targets, int batch,
                              float grad_scale, TracedComm& tp) {
  const int D = config_.input_dim, H = local_hidden_, O = config_.output_dim;
  const int L = config_.num_blocks;
  DTSIM_CHECK(targets.size() == size_t(batch) * O);
  tp.timeline().open("forward");
  run_forward(x, batch, tp);
  const float loss = model::mse_loss_forward(out_.span(), targets, batch, O);
  tp.timeline().close();
  tp.timeline().open("backward");
  const size_t bd = size_t(batch) * D, bh = size_t(batch) * H;
  std::fill(dout_.data(), dout_.data() + dout_.size(), 0.0f);
  model::mse_loss_backward(out_.span(), targets, batch, O, grad_scale, dout_.span());

  {  // Head, replicated: identical inputs give identical gradients on every rank.
    std::span<const float> p = store_.layer_params(L);
    std::span<float> g = store_.begin_layer_grads(L);
    std::fill(dx_.data(), dx_.data() + dx_.size(), 0.0f);
    model::linear_backward(dout_.span(), xs_.span().subspan(L * bd, bd), p.first(size_t(O) * D),
                           dx_.span(), g.first(size_t(O) * D), g.subspan(size_t(O) * D, O), batch,
                           D, O);
    store_.end_layer_grads(L);
  }
  const BlockOffsets o = block_offsets(D, H);
  for (int l = L - 1; l >= 0; --l) {
    std::span<const float> p = store_.layer_params(l);
    std::span<float> g = store_.begin_layer_grads(l);
    auto x_in = xs_.span().subspan(l * bd, bd);
    auto pre = pre_.span().subspan(l * bh, bh);
    auto hid = hid_.span().subspan(l * bh, bh);
    std::fill(dh_.data(), dh_.data() + dh_.size(), 0.0f);
    std::fill(dp_.data(), dp_.data() + dp_.size(), 0.0f);
    // Row-parallel W2: dx_ (the block output's gradient) is replicated, so db2 is too.
    model::linear_backward(dx_.span(), hid, p.subspan(o.w2, size_t(D) * H), dh_.span(),
                           g.subspan(o.w2, size_t(D) * H), g.subspan(o.b2, D), batch, H, D);
    model::gelu_backward(pre, dh_.span(), dp_.span());
    if (l > 0) {
      std::fill(dxp_.data(), dxp_.data() + dxp_.size(), 0.0f);
      model::linear_backward(dp_.span(), x_in, p.subspan(o.w1, size_t(H) * D), dxp_.span(),
                             g.subspan(o.w1, size_t(H) * D), g.subspan(o.b1, H), batch, D, H);
      tp.all_reduce(dxp_.span());  // f's backward: sum the partial input gradients
      for (size_t i = 0; i < bd; ++i) dx_[i] += dxp_[i];  // on top of the residual's
    } else {
      model::linear_backward(dp_.span(), x_in, p.subspan(o.w1, size_t(H) * D), {},
                             g.subspan(o.w1, size_t(H) * D), g.subspan(o.b1, H), batch, D, H);
    }
    store_.end_layer_grads(l);
  }
  tp.timeline().close();
  return loss;
}

}  // namespace dtsim::train
