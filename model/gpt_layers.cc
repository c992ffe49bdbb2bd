#include "model/gpt_layers.h"

#include <algorithm>
#include <cmath>

#include "model/attention.h"
#include "model/check.h"
#include "model/gpt_kernels.h"
#include "model/kernels.h"
#include "model/mlp_layers.h"

namespace dtsim::model {
namespace {

// What a pre-norm saves: the normalised input (rows, D) and each row's mean and rstd.
struct NormState : LayerState {
  explicit NormState(MemoryLedger* ledger) : ledger(ledger) {}
  void ensure(size_t rows, size_t dim, bool keep_xn) {
    if (keep_xn) ensure_size(xn, ledger, rows * dim);
    ensure_size(mean, ledger, rows);
    ensure_size(rstd, ledger, rows);
  }
  MemoryLedger* ledger;
  TrackedBuffer<float> xn, mean, rstd;
};

struct AttentionState : NormState {
  using NormState::NormState;
  TrackedBuffer<float> qkv, att, lse;  // (rows, 3E), (rows, E), (B, H, S)
};

struct GptMlpState : NormState {
  using NormState::NormState;
  TrackedBuffer<float> hid, dgelu;  // gelu(pre), gelu'(pre), (rows, F) each
};

void add_residual(std::span<const float> x, std::span<float> y) {
  for (size_t i = 0; i < x.size(); ++i) y[i] += x[i];
}

}  // namespace

// ---- TokenEmbedding ----

void TokenEmbedding::add_params(ParamLayout& layout) const {
  layout.begin_layer(name_);
  layout.add(name_ + ".wte", vocab_, dim_);
  layout.add(name_ + ".wpe", seq_, dim_);
}

std::unique_ptr<LayerState> TokenEmbedding::make_state(MemoryLedger* /*ledger*/) const {
  return std::make_unique<LayerState>();
}

void TokenEmbedding::forward(std::span<const float> p, std::span<const float> x, int batch,
                             std::span<float> y, LayerState& /*state*/, Workspace& /*ws*/) {
  const size_t vd = size_t(vocab_) * dim_;
  embedding_forward(x, p.first(vd), p.subspan(vd, size_t(seq_) * dim_), y, batch, seq_, dim_,
                    vocab_);
}

void TokenEmbedding::backward(std::span<const float> /*p*/, std::span<const float> x,
                              std::span<const float> dy, const BackwardScale& scale,
                              std::span<float> g, std::span<float> dx, LayerState& /*state*/,
                              Workspace& /*ws*/) {
  const size_t vd = size_t(vocab_) * dim_;
  embedding_backward(x, dy, g.first(vd), g.subspan(vd, size_t(seq_) * dim_), scale.batch, seq_,
                     dim_);
  std::fill(dx.begin(), dx.end(), 0.0f);
}

// ---- AttentionBlock ----

namespace {
// Offsets of ln.g, ln.b, qkv.w, qkv.b, proj.w, proj.b in the layer.
struct AttentionOffsets {
  size_t g, b, wqkv, bqkv, wo, bo;
  AttentionOffsets(int d, int e)
      : g(0),
        b(d),
        wqkv(2 * size_t(d)),
        bqkv(wqkv + 3 * size_t(e) * d),
        wo(bqkv + 3 * size_t(e)),
        bo(wo + size_t(d) * e) {}
};
}  // namespace

AttentionBlock::AttentionBlock(std::string name, int seq, int dim, int heads, int head_dim)
    : name_(std::move(name)), seq_(seq), dim_(dim), heads_(heads), head_dim_(head_dim) {
  DTSIM_CHECK(seq > 0 && dim > 0 && heads > 0 && head_dim > 0 && head_dim <= kMaxHeadDim);
}

void AttentionBlock::add_params(ParamLayout& layout) const {
  const int e = heads_ * head_dim_;
  layout.begin_layer(name_);
  layout.add(name_ + ".ln.g", dim_, 1);
  layout.add(name_ + ".ln.b", dim_, 1);
  layout.add(name_ + ".qkv.w", 3 * e, dim_);
  layout.add(name_ + ".qkv.b", 3 * e, 1);
  layout.add(name_ + ".proj.w", dim_, e);
  layout.add(name_ + ".proj.b", dim_, 1);
}

std::unique_ptr<LayerState> AttentionBlock::make_state(MemoryLedger* ledger) const {
  return std::make_unique<AttentionState>(ledger);
}

void AttentionBlock::forward(std::span<const float> p, std::span<const float> x, int batch,
                             std::span<float> y, LayerState& state, Workspace& /*ws*/) {
  auto& s = static_cast<AttentionState&>(state);
  const int D = dim_, E = heads_ * head_dim_, S = seq_, rows = batch * S;
  const AttentionOffsets o(D, E);
  s.ensure(rows, D, true);
  ensure_size(s.qkv, s.ledger, size_t(rows) * 3 * E);
  ensure_size(s.att, s.ledger, size_t(rows) * E);
  ensure_size(s.lse, s.ledger, size_t(batch) * heads_ * S);
  layernorm_forward(x, p.subspan(o.g, D), p.subspan(o.b, D), s.xn.span(), s.mean.span(),
                    s.rstd.span(), rows, D);
  linear_forward(s.xn.span(), p.subspan(o.wqkv, size_t(3) * E * D), p.subspan(o.bqkv, 3 * E),
                 s.qkv.span(), rows, D, 3 * E);
  const AttentionShape a{head_dim_, 1.0f / std::sqrt(float(head_dim_)), true};
  for (int b = 0; b < batch; ++b) {
    const float* qkv = s.qkv.data() + size_t(b) * S * 3 * E;
    for (int h = 0; h < heads_; ++h) {
      const int c = h * head_dim_;
      attention_forward(a, {qkv + c, 3 * E, S, 0}, {qkv + E + c, qkv + 2 * E + c, 3 * E, S, 0},
                        s.att.data() + size_t(b) * S * E + c, E,
                        s.lse.data() + (size_t(b) * heads_ + h) * S);
    }
  }
  linear_forward(s.att.span(), p.subspan(o.wo, size_t(D) * E), p.subspan(o.bo, D), y, rows, E, D);
  add_residual(x.first(size_t(rows) * D), y);
}

void AttentionBlock::backward(std::span<const float> p, std::span<const float> x,
                              std::span<const float> dy, const BackwardScale& scale,
                              std::span<float> g, std::span<float> dx, LayerState& state,
                              Workspace& ws) {
  auto& s = static_cast<AttentionState&>(state);
  const int D = dim_, E = heads_ * head_dim_, S = seq_, batch = scale.batch, rows = batch * S;
  const AttentionOffsets o(D, E);
  std::span<float> datt = ws.take(0, size_t(rows) * E);
  linear_input_grad(dy, p.subspan(o.wo, size_t(D) * E), datt, rows, E, D);
  linear_weight_grads(false, dy, s.att.span(), g.subspan(o.wo, size_t(D) * E), g.subspan(o.bo, D),
                      rows, E, D);
  std::span<float> dqkv = ws.take(1, size_t(rows) * 3 * E);
  std::fill(dqkv.begin(), dqkv.end(), 0.0f);
  std::span<float> delta = ws.take(3, S);
  const AttentionShape a{head_dim_, 1.0f / std::sqrt(float(head_dim_)), true};
  for (int b = 0; b < batch; ++b) {
    const size_t r0 = size_t(b) * S;
    const float* qkv = s.qkv.data() + r0 * 3 * E;
    float* dq = dqkv.data() + r0 * 3 * E;
    for (int h = 0; h < heads_; ++h) {
      const int c = h * head_dim_;
      const float* att = s.att.data() + r0 * E + c;
      const float* d_o = datt.data() + r0 * E + c;
      const float* lse = s.lse.data() + (size_t(b) * heads_ + h) * S;
      attention_backward_delta(head_dim_, S, att, E, d_o, E, delta.data());
      attention_backward(a, {qkv + c, 3 * E, S, 0}, {qkv + E + c, qkv + 2 * E + c, 3 * E, S, 0},
                         d_o, E, lse, delta.data(), dq + c, 3 * E, dq + E + c, dq + 2 * E + c,
                         3 * E);
    }
  }
  std::span<float> dxn = ws.take(2, size_t(rows) * D);
  linear_input_grad(dqkv, p.subspan(o.wqkv, size_t(3) * E * D), dxn, rows, D, 3 * E);
  linear_weight_grads(false, dqkv, s.xn.span(), g.subspan(o.wqkv, size_t(3) * E * D),
                      g.subspan(o.bqkv, 3 * E), rows, D, 3 * E);
  if (!dx.empty()) std::copy_n(dy.begin(), size_t(rows) * D, dx.begin());  // the residual
  layernorm_backward(dxn, x, p.subspan(o.g, D), s.mean.span(), s.rstd.span(), dx, g.subspan(o.g, D),
                     g.subspan(o.b, D), rows, D);
}

// ---- GptMlpBlock ----

namespace {
// Offsets of ln.g, ln.b, then fc1.w, fc1.b, fc2.w, fc2.b as MlpBlock's w1, b1, w2, b2.
// (fc.* are relative to fc0).
struct GptMlpOffsets {
  size_t g, b, fc0;
  MlpBlockOffsets fc;
  GptMlpOffsets(int d, int f) : g(0), b(d), fc0(2 * size_t(d)), fc(d, f) {}
};
}  // namespace

void GptMlpBlock::add_params(ParamLayout& layout) const {
  layout.begin_layer(name_);
  layout.add(name_ + ".ln.g", dim_, 1);
  layout.add(name_ + ".ln.b", dim_, 1);
  layout.add(name_ + ".fc1.w", hidden_, dim_);
  layout.add(name_ + ".fc1.b", hidden_, 1);
  layout.add(name_ + ".fc2.w", dim_, hidden_);
  layout.add(name_ + ".fc2.b", dim_, 1);
}

std::unique_ptr<LayerState> GptMlpBlock::make_state(MemoryLedger* ledger) const {
  return std::make_unique<GptMlpState>(ledger);
}

void GptMlpBlock::forward(std::span<const float> p, std::span<const float> x, int batch,
                          std::span<float> y, LayerState& state, Workspace& /*ws*/) {
  auto& s = static_cast<GptMlpState&>(state);
  const int D = dim_, F = hidden_, rows = batch * seq_;
  const GptMlpOffsets o(D, F);
  std::span<const float> fc = p.subspan(o.fc0);
  s.ensure(rows, D, true);
  ensure_size(s.hid, s.ledger, size_t(rows) * F);
  ensure_size(s.dgelu, s.ledger, size_t(rows) * F);
  layernorm_forward(x, p.subspan(o.g, D), p.subspan(o.b, D), s.xn.span(), s.mean.span(),
                    s.rstd.span(), rows, D);
  linear_forward(s.xn.span(), fc.subspan(o.fc.w1, size_t(F) * D), fc.subspan(o.fc.b1, F),
                 s.dgelu.span(), rows, D, F);
  gelu_forward_keep_grad(s.dgelu.span(), s.hid.span(), s.dgelu.span());
  linear_forward(s.hid.span(), fc.subspan(o.fc.w2, size_t(D) * F), fc.subspan(o.fc.b2, D), y, rows,
                 F, D);
  add_residual(x.first(size_t(rows) * D), y);
}

void GptMlpBlock::backward(std::span<const float> p, std::span<const float> x,
                           std::span<const float> dy, const BackwardScale& scale,
                           std::span<float> g, std::span<float> dx, LayerState& state,
                           Workspace& ws) {
  auto& s = static_cast<GptMlpState&>(state);
  const int D = dim_, F = hidden_, rows = scale.batch * seq_;
  const GptMlpOffsets o(D, F);
  std::span<const float> fc = p.subspan(o.fc0);
  std::span<float> gfc = g.subspan(o.fc0);
  std::span<float> dpre = ws.take(0, size_t(rows) * F);
  linear_input_grad_scaled(dy, fc.subspan(o.fc.w2, size_t(D) * F), s.dgelu.span(), dpre, rows, F,
                           D);
  linear_weight_grads(false, dy, s.hid.span(), gfc.subspan(o.fc.w2, size_t(D) * F),
                      gfc.subspan(o.fc.b2, D), rows, F, D);
  std::span<float> dxn = ws.take(1, size_t(rows) * D);
  linear_input_grad(dpre, fc.subspan(o.fc.w1, size_t(F) * D), dxn, rows, D, F);
  linear_weight_grads(false, dpre, s.xn.span(), gfc.subspan(o.fc.w1, size_t(F) * D),
                      gfc.subspan(o.fc.b1, F), rows, D, F);
  if (!dx.empty()) std::copy_n(dy.begin(), size_t(rows) * D, dx.begin());  // the residual
  layernorm_backward(dxn, x, p.subspan(o.g, D), s.mean.span(), s.rstd.span(), dx, g.subspan(o.g, D),
                     g.subspan(o.b, D), rows, D);
}

// ---- LayerNormLayer ----

void LayerNormLayer::add_params(ParamLayout& layout) const {
  layout.begin_layer(name_);
  layout.add(name_ + ".g", dim_, 1);
  layout.add(name_ + ".b", dim_, 1);
}

std::unique_ptr<LayerState> LayerNormLayer::make_state(MemoryLedger* ledger) const {
  return std::make_unique<NormState>(ledger);
}

void LayerNormLayer::forward(std::span<const float> p, std::span<const float> x, int batch,
                             std::span<float> y, LayerState& state, Workspace& /*ws*/) {
  auto& s = static_cast<NormState&>(state);
  const int rows = batch * seq_;
  s.ensure(rows, dim_, false);
  layernorm_forward(x, p.first(dim_), p.subspan(dim_, dim_), y, s.mean.span(), s.rstd.span(), rows,
                    dim_);
}

void LayerNormLayer::backward(std::span<const float> p, std::span<const float> x,
                              std::span<const float> dy, const BackwardScale& scale,
                              std::span<float> g, std::span<float> dx, LayerState& state,
                              Workspace& /*ws*/) {
  auto& s = static_cast<NormState&>(state);
  std::fill(dx.begin(), dx.end(), 0.0f);
  layernorm_backward(dy, x, p.first(dim_), s.mean.span(), s.rstd.span(), dx, g.first(dim_),
                     g.subspan(dim_, dim_), scale.batch * seq_, dim_);
}

}  // namespace dtsim::model
