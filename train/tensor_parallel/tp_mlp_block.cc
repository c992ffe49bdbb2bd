#include "train/tensor_parallel/tp_mlp_block.h"

#include <algorithm>
#include <utility>

#include "model/check.h"
#include "model/kernels.h"
#include "model/mlp_layers.h"

namespace dtsim::train {

TpMlpBlock::TpMlpBlock(std::string name, int dim, int hidden, int tp_rank, int tp_size,
                       TracedComm* tp)
    : name_(std::move(name)),
      dim_(dim),
      hidden_(hidden),
      local_hidden_(hidden / tp_size),
      tp_rank_(tp_rank),
      tp_(tp) {
  DTSIM_CHECK(tp_size >= 1 && hidden % tp_size == 0 && tp_rank >= 0 && tp_rank < tp_size);
  DTSIM_CHECK(tp == nullptr || (tp->rank() == tp_rank && tp->size() == tp_size));
}

void TpMlpBlock::add_params(model::ParamLayout& layout) const {
  const int D = dim_, H = hidden_, h = local_hidden_, h0 = tp_rank_ * h;
  layout.begin_layer(name_);
  layout.add(name_ + ".w1", h, D, {.row0 = h0, .col0 = 0, .full_rows = H, .full_cols = D});
  layout.add(name_ + ".b1", h, 1, {.row0 = h0, .col0 = 0, .full_rows = H, .full_cols = 1});
  layout.add(name_ + ".w2", D, h, {.row0 = 0, .col0 = h0, .full_rows = D, .full_cols = H});
  layout.add(name_ + ".b2", D, 1);
}

std::unique_ptr<model::LayerState> TpMlpBlock::make_state(model::MemoryLedger* ledger) const {
  return std::make_unique<model::MlpBlockState>(ledger);
}

void TpMlpBlock::forward(std::span<const float> p, std::span<const float> x, int batch,
                         std::span<float> y, model::LayerState& state, model::Workspace& /*ws*/) {
  const int D = dim_, H = local_hidden_;
  const model::MlpBlockOffsets o(D, H);
  auto& s = static_cast<model::MlpBlockState&>(state);
  s.ensure(size_t(batch) * H);
  // Column-parallel W1 (+ local b1), local GELU, row-parallel W2 without its bias.
  model::linear_forward(x, p.subspan(o.w1, size_t(H) * D), p.subspan(o.b1, H), s.pre.span(), batch,
                        D, H);
  model::gelu_forward_keep_grad(s.pre.span(), s.hid.span(), s.pre.span());  // pre := gelu'(pre)
  model::linear_forward(s.hid.span(), p.subspan(o.w2, size_t(D) * H), {}, y, batch, H, D);
  tp_->all_reduce(y);  // g: sum the partial block outputs
  std::span<const float> b2 = p.subspan(o.b2, D);
  for (int r = 0; r < batch; ++r) {
    float* row = y.data() + size_t(r) * D;
    const float* in = x.data() + size_t(r) * D;
    for (int d = 0; d < D; ++d) row[d] = row[d] + b2[d] + in[d];  // b2 once, then residual
  }
}

// The parts of backward, as in model::MlpBlock: input_part writes dpre (B, H/T) through the
// local W2 columns and GELU (GELU's derivative applied as dh is stored); weight_part the local
// weight gradients and the replicated b2's (dy, the block output's gradient, is replicated);
// finish_dx the all-reduced input gradient on top of the residual's (workspace slot 2).
void TpMlpBlock::input_part(std::span<const float> p, std::span<const float> dy,
                            const model::MlpBlockState& s, int batch, std::span<float> dpre) const {
  const int D = dim_, H = local_hidden_;
  const model::MlpBlockOffsets o(D, H);
  model::linear_input_grad_scaled(dy, p.subspan(o.w2, size_t(D) * H), s.pre.span(), dpre, batch, H,
                                  D);
}

void TpMlpBlock::weight_part(std::span<const float> x, std::span<const float> dy,
                             std::span<const float> dpre, const model::MlpBlockState& s, int batch,
                             bool write, std::span<float> g) const {
  const int D = dim_, H = local_hidden_;
  const model::MlpBlockOffsets o(D, H);
  model::linear_weight_grads(write, dy, s.hid.span(), g.subspan(o.w2, size_t(D) * H),
                             g.subspan(o.b2, D), batch, H, D);
  model::linear_weight_grads(write, dpre, x, g.subspan(o.w1, size_t(H) * D), g.subspan(o.b1, H),
                             batch, D, H);
}

void TpMlpBlock::finish_dx(std::span<const float> p, std::span<const float> dy,
                           std::span<const float> dpre, int batch, std::span<float> dx,
                           model::Workspace& ws) const {
  if (dx.empty()) return;  // no input gradient, no all_reduce
  const int D = dim_, H = local_hidden_;
  const model::MlpBlockOffsets o(D, H);
  const size_t bd = size_t(batch) * D;
  std::span<float> dxp = ws.take(2, bd);
  model::linear_input_grad(dpre, p.subspan(o.w1, size_t(H) * D), dxp, batch, D, H);
  tp_->all_reduce(dxp);  // f's backward: sum the partial input gradients
  if (dx.data() != dy.data()) std::copy(dy.begin(), dy.end(), dx.begin());
  for (size_t i = 0; i < bd; ++i) dx[i] += dxp[i];  // on top of the residual's
}

void TpMlpBlock::backward(std::span<const float> p, std::span<const float> x,
                          std::span<const float> dy, const model::BackwardScale& scale,
                          std::span<float> g, std::span<float> dx, model::LayerState& state,
                          model::Workspace& ws) {
  const int batch = scale.batch;
  const auto& s = static_cast<model::MlpBlockState&>(state);
  const size_t bh = size_t(batch) * local_hidden_;
  std::span<float> dpre = ws.take(0, bh);
  input_part(p, dy, s, batch, dpre);
  // Reads dy before dx (which may alias it) is written.
  weight_part(x, dy, dpre, s, batch, scale.write_grads, g);
  finish_dx(p, dy, dpre, batch, dx, ws);
}

void TpMlpBlock::backward_input(std::span<const float> p, std::span<const float> /*x*/,
                                std::span<const float> dy, const model::BackwardScale& scale,
                                std::span<float> dx, model::LayerState& state,
                                model::Workspace& ws) {
  const int batch = scale.batch;
  auto& s = static_cast<model::MlpBlockState&>(state);
  const size_t bh = size_t(batch) * local_hidden_;
  model::ensure_size(s.dy, s.ledger, dy.size());
  model::ensure_size(s.dpre, s.ledger, bh);
  std::copy(dy.begin(), dy.end(), s.dy.data());
  input_part(p, s.dy.span(), s, batch, s.dpre.span());
  finish_dx(p, s.dy.span(), s.dpre.span(), batch, dx, ws);
}

void TpMlpBlock::backward_weight(std::span<const float> x, const model::BackwardScale& scale,
                                 std::span<float> g, model::LayerState& state,
                                 model::Workspace& /*ws*/) {
  const auto& s = static_cast<model::MlpBlockState&>(state);
  weight_part(x, s.dy.span(), s.dpre.span(), s, scale.batch, scale.write_grads, g);
}

model::Layers tp_mlp_layers(const model::MlpConfig& c, int tp_rank, int tp_size, TracedComm* tp) {
  model::Layers layers;
  for (int l = 0; l < c.num_blocks; ++l) {
    layers.push_back(std::make_unique<TpMlpBlock>("block" + std::to_string(l), c.input_dim,
                                                  c.hidden_dim, tp_rank, tp_size, tp));
  }
  layers.push_back(std::make_unique<model::Linear>("head", c.input_dim, c.output_dim));
  return layers;
}

}  // namespace dtsim::train
