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

std::unique_ptr<LayerState> Linear::make_state(MemoryLedger* ledger) const {
  return std::make_unique<LinearState>(ledger);
}

void Linear::forward(std::span<const float> p, std::span<const float> x, int batch,
                     std::span<float> y, LayerState& /*state*/, Workspace& /*ws*/) {
  linear_forward(x, p.first(size_t(out_) * in_), p.subspan(size_t(out_) * in_, out_), y, batch, in_,
                 out_);
}

void Linear::backward(std::span<const float> p, std::span<const float> x, std::span<const float> dy,
                      const BackwardScale& scale, std::span<float> g, std::span<float> dx,
                      LayerState& /*state*/, Workspace& /*ws*/) {
  if (!dx.empty()) linear_input_grad(dy, p.first(size_t(out_) * in_), dx, scale.batch, in_, out_);
  linear_weight_grads(scale.write_grads, dy, x, g.first(size_t(out_) * in_),
                      g.subspan(size_t(out_) * in_, out_), scale.batch, in_, out_);
}

void Linear::backward_sgd(std::span<float> p, std::span<const float> x, std::span<const float> dy,
                          const BackwardScale& scale, const SgdUpdate& u, std::span<float> dx,
                          LayerState& /*state*/, Workspace& /*ws*/) {
  if (!dx.empty()) linear_input_grad(dy, p.first(size_t(out_) * in_), dx, scale.batch, in_, out_);
  linear_weight_sgd(dy, x, p.first(size_t(out_) * in_), p.subspan(size_t(out_) * in_, out_),
                    scale.batch, in_, out_, u);
}

void Linear::backward_input(std::span<const float> p, std::span<const float> /*x*/,
                            std::span<const float> dy, const BackwardScale& scale,
                            std::span<float> dx, LayerState& state, Workspace& /*ws*/) {
  auto& s = static_cast<LinearState&>(state);
  ensure_size(s.dy, s.ledger, dy.size());
  std::copy(dy.begin(), dy.end(), s.dy.data());  // before dx, which may alias dy
  if (!dx.empty()) {
    linear_input_grad(s.dy.span(), p.first(size_t(out_) * in_), dx, scale.batch, in_, out_);
  }
}

void Linear::backward_weight(std::span<const float> x, const BackwardScale& scale,
                             std::span<float> g, LayerState& state, Workspace& /*ws*/) {
  const auto& s = static_cast<LinearState&>(state);
  // The weight (dy^T x) and bias (sum of dy) products of backward; w itself is not read.
  linear_weight_grads(scale.write_grads, s.dy.span(), x, g.first(size_t(out_) * in_),
                      g.subspan(size_t(out_) * in_, out_), scale.batch, in_, out_);
}

MlpBlock::MlpBlock(std::string name, int dim, int hidden, HiddenSharding sharding)
    : name_(std::move(name)),
      dim_(dim),
      hidden_(hidden / sharding.size),
      full_hidden_(hidden),
      sharding_(std::move(sharding)) {
  DTSIM_CHECK(sharding_.size >= 1 && hidden % sharding_.size == 0);
  DTSIM_CHECK(sharding_.rank >= 0 && sharding_.rank < sharding_.size);
  DTSIM_CHECK(sharding_.size == 1 || sharding_.reduce);
}

void add_sharded_ffn_params(ParamLayout& layout, const std::string& prefix, int dim, int hidden,
                            int full_hidden, int rank) {
  const int D = dim, H = full_hidden, h = hidden, h0 = rank * h;
  if (h == H) {
    layout.add(prefix + ".w1", h, D);
    layout.add(prefix + ".b1", h, 1);
    layout.add(prefix + ".w2", D, h);
  } else {
    layout.add(prefix + ".w1", h, D, {.row0 = h0, .col0 = 0, .full_rows = H, .full_cols = D});
    layout.add(prefix + ".b1", h, 1, {.row0 = h0, .col0 = 0, .full_rows = H, .full_cols = 1});
    layout.add(prefix + ".w2", D, h, {.row0 = 0, .col0 = h0, .full_rows = D, .full_cols = H});
  }
  layout.add(prefix + ".b2", D, 1);
}

void MlpBlock::add_params(ParamLayout& layout) const {
  layout.begin_layer(name_);
  add_sharded_ffn_params(layout, name_, dim_, hidden_, full_hidden_, sharding_.rank);
}

std::unique_ptr<LayerState> MlpBlock::make_state(MemoryLedger* ledger) const {
  return std::make_unique<MlpBlockState>(ledger);
}

void MlpBlock::forward(std::span<const float> p, std::span<const float> x, int batch,
                       std::span<float> y, LayerState& state, Workspace& ws) {
  const int D = dim_, H = hidden_;
  const MlpBlockOffsets o(D, H);
  auto& s = static_cast<MlpBlockState&>(state);
  if (sharded()) return forward_sharded(p, x, batch, y, s);
  const size_t bh = size_t(batch) * H;
  std::span<float> hid;
  if (s.selective) {  // pre stays the pre-activation; gelu and gelu' go to the workspace
    ensure_size(s.pre, s.ledger, bh);
    s.hid.release();
    hid = ws.take(0, bh);
  } else {
    s.ensure(bh);
    hid = s.hid.span();
  }
  linear_forward(x, p.subspan(o.w1, size_t(H) * D), p.subspan(o.b1, H), s.pre.span(), batch, D, H);
  if (s.selective) {
    gelu_forward(s.pre.span(), hid);  // bitwise gelu_forward_keep_grad's output
  } else {
    gelu_forward_keep_grad(s.pre.span(), hid, s.pre.span());  // pre := gelu'(pre)
  }
  linear_forward(hid, p.subspan(o.w2, size_t(D) * H), p.subspan(o.b2, D), y, batch, H, D);
  const size_t bd = size_t(batch) * D;
  for (size_t i = 0; i < bd; ++i) y[i] += x[i];  // residual
}

void MlpBlock::forward_sharded(std::span<const float> p, std::span<const float> x, int batch,
                               std::span<float> y, MlpBlockState& s) const {
  const int D = dim_, H = hidden_;
  const MlpBlockOffsets o(D, H);
  s.ensure(size_t(batch) * H);
  // Column-parallel W1 (+ local b1), local GELU, row-parallel W2 without its bias.
  linear_forward(x, p.subspan(o.w1, size_t(H) * D), p.subspan(o.b1, H), s.pre.span(), batch, D, H);
  gelu_forward_keep_grad(s.pre.span(), s.hid.span(), s.pre.span());  // pre := gelu'(pre)
  linear_forward(s.hid.span(), p.subspan(o.w2, size_t(D) * H), {}, y, batch, H, D);
  sharding_.reduce(y.first(size_t(batch) * D));  // g: sum the partial block outputs
  std::span<const float> b2 = p.subspan(o.b2, D);
  for (int r = 0; r < batch; ++r) {
    float* row = y.data() + size_t(r) * D;
    const float* in = x.data() + size_t(r) * D;
    for (int d = 0; d < D; ++d) row[d] = row[d] + b2[d] + in[d];  // b2 once, then residual
  }
}

// The three parts of a block's backward. input_part: dpre (B, H) = the pre-activation
// gradient, through W2 and GELU (dh = dy W2 times gelu' as each tile is stored); weight_part:
// the weight and bias gradients from dy and dpre; finish_dx: dx = dy (the residual) + dpre W1.
// Each kernel call is backward's own, so any order that reads dy before dx overwrites it
// gives bitwise the same sums.
void MlpBlock::input_part(std::span<const float> p, std::span<const float> dy,
                          const MlpBlockState& s, int batch, std::span<float> dpre) const {
  const int D = dim_, H = hidden_;
  const MlpBlockOffsets o(D, H);
  linear_input_grad_scaled(dy, p.subspan(o.w2, size_t(D) * H), s.pre.span(), dpre, batch, H, D);
}

void MlpBlock::weight_part(std::span<const float> x, std::span<const float> dy,
                           std::span<const float> dpre, const MlpBlockState& s, int batch,
                           bool write, std::span<float> g) const {
  const int D = dim_, H = hidden_;
  const MlpBlockOffsets o(D, H);
  // W1's first, while dpre (just written) is in L2; the two are independent.
  linear_weight_grads(write, dpre, x, g.subspan(o.w1, size_t(H) * D), g.subspan(o.b1, H), batch, D,
                      H);
  linear_weight_grads(write, dy, s.hid.span(), g.subspan(o.w2, size_t(D) * H), g.subspan(o.b2, D),
                      batch, H, D);
}

void MlpBlock::finish_dx(std::span<const float> p, std::span<const float> x,
                         std::span<const float> dy, std::span<const float> dpre, int batch,
                         std::span<float> dx, Workspace& ws) const {
  if (dx.empty()) return;  // (tensor parallel: no reduce either)
  const int D = dim_, H = hidden_;
  const MlpBlockOffsets o(D, H);
  if (sharded()) {  // the partial input gradient, summed (f's backward), on dy
    const size_t bd = size_t(batch) * D;
    std::span<float> dxp = ws.take(2, bd);
    linear_input_grad(dpre, p.subspan(o.w1, size_t(H) * D), dxp, batch, D, H);
    sharding_.reduce(dxp);
    if (dx.data() != dy.data()) std::copy(dy.begin(), dy.end(), dx.begin());
    for (size_t i = 0; i < bd; ++i) dx[i] += dxp[i];
    return;
  }
  // The residual makes dy the first term of dx; the block's own part accumulates on top.
  if (dx.data() != dy.data()) std::copy(dy.begin(), dy.end(), dx.begin());
  linear_backward(dpre, x, p.subspan(o.w1, size_t(H) * D), dx, {}, {}, batch, D, H);
}

void MlpBlock::backward(std::span<const float> p, std::span<const float> x,
                        std::span<const float> dy, const BackwardScale& scale, std::span<float> g,
                        std::span<float> dx, LayerState& state, Workspace& ws) {
  const int batch = scale.batch;
  const auto& s = static_cast<MlpBlockState&>(state);
  const size_t bh = size_t(batch) * hidden_;
  std::span<float> dpre = ws.take(0, bh);
  input_part(p, dy, s, batch, dpre);
  weight_part(x, dy, dpre, s, batch, scale.write_grads,
              g);  // reads dy before dx (which may alias it) is written
  finish_dx(p, x, dy, dpre, batch, dx, ws);
}

void MlpBlock::backward_sgd(std::span<float> p, std::span<const float> x, std::span<const float> dy,
                            const BackwardScale& scale, const SgdUpdate& u, std::span<float> dx,
                            LayerState& state, Workspace& ws) {
  const int batch = scale.batch, D = dim_, H = hidden_;
  const MlpBlockOffsets o(D, H);
  const auto& s = static_cast<MlpBlockState&>(state);
  const size_t bh = size_t(batch) * H;
  std::span<float> dpre = ws.take(0, bh);
  input_part(p, dy, s, batch, dpre);  // the last read of W2
  // W2's update reads dy before dx (which may alias it) is written.
  linear_weight_sgd(dy, s.hid.span(), p.subspan(o.w2, size_t(D) * H), p.subspan(o.b2, D), batch, H,
                    D, u);
  finish_dx(p, x, dy, dpre, batch, dx, ws);  // the last read of W1
  linear_weight_sgd(dpre, x, p.subspan(o.w1, size_t(H) * D), p.subspan(o.b1, H), batch, D, H, u);
}

void MlpBlock::backward_input(std::span<const float> p, std::span<const float> x,
                              std::span<const float> dy, const BackwardScale& scale,
                              std::span<float> dx, LayerState& state, Workspace& ws) {
  const int batch = scale.batch;
  auto& s = static_cast<MlpBlockState&>(state);
  const size_t bh = size_t(batch) * hidden_;
  ensure_size(s.dy, s.ledger, dy.size());
  ensure_size(s.dpre, s.ledger, bh);
  std::copy(dy.begin(), dy.end(), s.dy.data());
  input_part(p, s.dy.span(), s, batch, s.dpre.span());
  finish_dx(p, x, s.dy.span(), s.dpre.span(), batch, dx, ws);
}

void MlpBlock::backward_weight(std::span<const float> x, const BackwardScale& scale,
                               std::span<float> g, LayerState& state, Workspace& /*ws*/) {
  const auto& s = static_cast<MlpBlockState&>(state);
  weight_part(x, s.dy.span(), s.dpre.span(), s, scale.batch, scale.write_grads, g);
}

void MlpBlock::rebuild_state(std::span<const float> /*p*/, std::span<const float> /*x*/, int batch,
                             LayerState& state) {
  auto& s = static_cast<MlpBlockState&>(state);
  const size_t bh = size_t(batch) * hidden_;
  DTSIM_CHECK(s.selective && s.pre.size() == bh);
  ensure_size(s.hid, s.ledger, bh);
  // forward's own call on the same pre: the bits a non-selective forward saves.
  gelu_forward_keep_grad(s.pre.span(), s.hid.span(), s.pre.span());  // pre := gelu'(pre)
}

void MlpBlock::release_rebuilt(LayerState& state) {
  static_cast<MlpBlockState&>(state).hid.release();
}

}  // namespace dtsim::model
