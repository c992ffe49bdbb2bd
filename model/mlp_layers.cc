#include "model/mlp_layers.h"

#include <algorithm>

#include "model/check.h"
#include "model/kernels.h"

namespace dtsim::model {

void Linear::add_params(ParamLayout& layout) const {
  layout.begin_layer(name_);
  layout.add(name_ + ".w", out_, in_);
  layout.add(name_ + ".b", out_, 1);
}

std::unique_ptr<LayerState> Linear::make_state(MemoryLedger* /*ledger*/) const {
  return std::make_unique<LayerState>();
}

void Linear::forward(std::span<const float> p, std::span<const float> x, int batch,
                     std::span<float> y, LayerState& /*state*/, Workspace& /*ws*/) {
  linear_forward(x, p.first(size_t(out_) * in_), p.subspan(size_t(out_) * in_, out_), y, batch, in_,
                 out_);
}

void Linear::backward(std::span<const float> p, std::span<const float> x, std::span<const float> dy,
                      const BackwardScale& scale, std::span<float> g, std::span<float> dx,
                      LayerState& /*state*/, Workspace& /*ws*/) {
  std::fill(dx.begin(), dx.end(), 0.0f);
  linear_backward(dy, x, p.first(size_t(out_) * in_), dx, g.first(size_t(out_) * in_),
                  g.subspan(size_t(out_) * in_, out_), scale.batch, in_, out_);
}

void MlpBlock::add_params(ParamLayout& layout) const {
  layout.begin_layer(name_);
  layout.add(name_ + ".w1", hidden_, dim_);
  layout.add(name_ + ".b1", hidden_, 1);
  layout.add(name_ + ".w2", dim_, hidden_);
  layout.add(name_ + ".b2", dim_, 1);
}

std::unique_ptr<LayerState> MlpBlock::make_state(MemoryLedger* ledger) const {
  return std::make_unique<MlpBlockState>(ledger);
}

void MlpBlock::forward(std::span<const float> p, std::span<const float> x, int batch,
                       std::span<float> y, LayerState& state, Workspace& /*ws*/) {
  const int D = dim_, H = hidden_;
  const MlpBlockOffsets o(D, H);
  auto& s = static_cast<MlpBlockState&>(state);
  s.ensure(size_t(batch) * H);
  linear_forward(x, p.subspan(o.w1, size_t(H) * D), p.subspan(o.b1, H), s.pre.span(), batch, D, H);
  gelu_forward(s.pre.span(), s.hid.span());
  linear_forward(s.hid.span(), p.subspan(o.w2, size_t(D) * H), p.subspan(o.b2, D), y, batch, H, D);
  const size_t bd = size_t(batch) * D;
  for (size_t i = 0; i < bd; ++i) y[i] += x[i];  // residual
}

void MlpBlock::backward(std::span<const float> p, std::span<const float> x,
                        std::span<const float> dy, const BackwardScale& scale, std::span<float> g,
                        std::span<float> dx, LayerState& state, Workspace& ws) {
  const int D = dim_, H = hidden_, batch = scale.batch;
  const MlpBlockOffsets o(D, H);
  auto& s = static_cast<MlpBlockState&>(state);
  const size_t bh = size_t(batch) * H;
  std::span<float> dh = ws.take(0, bh), dp = ws.take(1, bh);
  std::fill(dh.begin(), dh.end(), 0.0f);
  std::fill(dp.begin(), dp.end(), 0.0f);
  linear_backward(dy, s.hid.span(), p.subspan(o.w2, size_t(D) * H), dh,
                  g.subspan(o.w2, size_t(D) * H), g.subspan(o.b2, D), batch, H, D);
  gelu_backward(s.pre.span(), dh, dp);
  // The residual makes dy the first term of dx; the block's own part accumulates on top.
  if (!dx.empty() && dx.data() != dy.data()) std::copy(dy.begin(), dy.end(), dx.begin());
  linear_backward(dp, x, p.subspan(o.w1, size_t(H) * D), dx, g.subspan(o.w1, size_t(H) * D),
                  g.subspan(o.b1, H), batch, D, H);
}

}  // namespace dtsim::model
