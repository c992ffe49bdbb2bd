#include "model/gpt_layers.h"

#include <algorithm>
#include <cmath>

#include "model/check.h"
#include "model/gpt_kernels.h"
#include "model/gpt_regions.h"
#include "model/kernels.h"
#include "model/mlp_layers.h"

namespace dtsim::model {
namespace {

struct GptMlpState : NormState {
  using NormState::NormState;
  TrackedBuffer<float> hid, dgelu;  // gelu(pre), gelu'(pre), (rows, F) each
};

}  // namespace

// ---- TokenEmbedding ----

TokenEmbedding::TokenEmbedding(std::string name, int vocab, int seq, int dim,
                               SequenceSharding sharding)
    : name_(std::move(name)),
      vocab_(vocab),
      seq_(seq),
      dim_(dim),
      seq_local_(sharding.sequence_parallel() ? seq / sharding.size : seq),
      sharding_(std::move(sharding)) {
  DTSIM_CHECK(!sharding_.sequence_parallel() || seq % sharding_.size == 0);
}

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
  const size_t vd = size_t(vocab_) * dim_, sd = size_t(seq_) * dim_;
  if (!sharding_.sequence_parallel()) {
    embedding_forward(x, p.first(vd), p.subspan(vd, sd), y, batch, seq_, dim_, vocab_);
    return;
  }
  const int t0 = sharding_.rank * seq_local_;  // this rank's first token
  const size_t run = size_t(seq_local_) * dim_;
  for (int b = 0; b < batch; ++b) {
    embedding_forward(x.subspan(size_t(b) * seq_ + t0, seq_local_), p.first(vd),
                      p.subspan(vd + size_t(t0) * dim_, run), y.subspan(b * run, run), 1,
                      seq_local_, dim_, vocab_);
  }
}

void TokenEmbedding::backward(std::span<const float> /*p*/, std::span<const float> x,
                              std::span<const float> dy, const BackwardScale& scale,
                              std::span<float> g, std::span<float> dx, LayerState& /*state*/,
                              Workspace& ws) {
  const size_t vd = size_t(vocab_) * dim_, sd = size_t(seq_) * dim_;
  std::fill(dx.begin(), dx.end(), 0.0f);
  if (!sharding_.sequence_parallel()) {
    embedding_backward(x, dy, g.first(vd), g.subspan(vd, sd), scale.batch, seq_, dim_);
    return;
  }
  // This rank's tokens give a part of the tables' gradients: summed over the ranks.
  std::span<float> part = ws.take(0, vd + sd);
  std::fill(part.begin(), part.end(), 0.0f);
  const int t0 = sharding_.rank * seq_local_;
  const size_t run = size_t(seq_local_) * dim_;
  for (int b = 0; b < scale.batch; ++b) {
    embedding_backward(x.subspan(size_t(b) * seq_ + t0, seq_local_), dy.subspan(b * run, run),
                       part.first(vd), part.subspan(vd + size_t(t0) * dim_, run), 1, seq_local_,
                       dim_);
  }
  sharding_.reduce(part);
  for (size_t i = 0; i < vd + sd; ++i) g[i] += part[i];
}

// ---- GptMlpBlock ----

namespace {
// Offsets of ln.g, ln.b, then w1, b1, w2, b2 as MlpBlock's (fc.* are relative to fc0; F is
// this rank's).
struct GptMlpOffsets {
  size_t g, b, fc0;
  MlpBlockOffsets fc;
  GptMlpOffsets(int d, int f) : g(0), b(d), fc0(2 * size_t(d)), fc(d, f) {}
};
}  // namespace

GptMlpBlock::GptMlpBlock(std::string name, int seq, int dim, int hidden, SequenceSharding sharding)
    : name_(std::move(name)),
      seq_(seq),
      dim_(dim),
      hidden_(hidden / std::max(1, sharding.size)),
      full_hidden_(hidden),
      seq_local_(sharding.sequence_parallel() ? seq / sharding.size : seq),
      sharding_(std::move(sharding)) {
  DTSIM_CHECK(sharding_.size >= 1 && hidden % sharding_.size == 0);
  DTSIM_CHECK(sharding_.rank >= 0 && sharding_.rank < sharding_.size);
  DTSIM_CHECK(sharding_.size == 1 || sharding_.reduce);
  DTSIM_CHECK(!sharding_.sequence_parallel() || seq % sharding_.size == 0);
}

void GptMlpBlock::add_params(ParamLayout& layout) const {
  layout.begin_layer(name_);
  layout.add(name_ + ".ln.g", dim_, 1);
  layout.add(name_ + ".ln.b", dim_, 1);
  add_sharded_ffn_params(layout, name_, dim_, hidden_, full_hidden_, sharding_.rank);
}

std::unique_ptr<LayerState> GptMlpBlock::make_state(MemoryLedger* ledger) const {
  return std::make_unique<GptMlpState>(ledger);
}

void GptMlpBlock::forward(std::span<const float> p, std::span<const float> x, int batch,
                          std::span<float> y, LayerState& state, Workspace& ws) {
  auto& s = static_cast<GptMlpState&>(state);
  const int D = dim_, F = hidden_, rows = batch * seq_;
  const TokenRows t{batch, seq_, seq_local_, D};
  const GptMlpOffsets o(D, F);
  std::span<const float> fc = p.subspan(o.fc0);
  const bool sharded = static_cast<bool>(sharding_.reduce);
  prenorm_forward(sharding_, p.subspan(o.g, D), p.subspan(o.b, D), x, t, s, ws);
  ensure_size(s.dgelu, s.ledger, size_t(rows) * F);  // pre, then gelu'(pre) in place
  linear_forward(s.xn.span(), fc.subspan(o.fc.w1, size_t(F) * D), fc.subspan(o.fc.b1, F),
                 s.dgelu.span(), rows, D, F);
  std::span<float> hid;
  if (s.selective) {  // dgelu stays pre; gelu(pre) goes to the workspace
    s.hid.release();
    hid = ws.take(0, size_t(rows) * F);
    gelu_forward(s.dgelu.span(), hid);  // bitwise gelu_forward_keep_grad's output
  } else {
    ensure_size(s.hid, s.ledger, size_t(rows) * F);
    hid = s.hid.span();
    gelu_forward_keep_grad(s.dgelu.span(), hid, s.dgelu.span());
  }
  // Row-parallel: the bias joins after g, once.
  std::span<float> core = core_output(sharding_, y, t, ws);
  linear_forward(hid, fc.subspan(o.fc.w2, size_t(D) * F),
                 sharded ? std::span<const float>{} : fc.subspan(o.fc.b2, D), core, rows, F, D);
  block_output(sharding_, core, fc.subspan(o.fc.b2, D), x, t, y, ws);
}

void GptMlpBlock::backward(std::span<const float> p, std::span<const float> x,
                           std::span<const float> dy, const BackwardScale& scale,
                           std::span<float> g, std::span<float> dx, LayerState& state,
                           Workspace& ws) {
  auto& s = static_cast<GptMlpState&>(state);
  const int D = dim_, F = hidden_, rows = scale.batch * seq_;
  const TokenRows t{scale.batch, seq_, seq_local_, D};
  const GptMlpOffsets o(D, F);
  std::span<const float> fc = p.subspan(o.fc0);
  std::span<float> gfc = g.subspan(o.fc0);
  std::span<const float> dyf = full_output_grad(sharding_, dy, t, ws);
  std::span<float> dpre = ws.take(0, size_t(rows) * F);
  linear_input_grad_scaled(dyf, fc.subspan(o.fc.w2, size_t(D) * F), s.dgelu.span(), dpre, rows, F,
                           D);
  linear_weight_grads(false, dyf, s.hid.span(), gfc.subspan(o.fc.w2, size_t(D) * F),
                      gfc.subspan(o.fc.b2, D), rows, F, D);
  std::span<float> dxn = ws.take(1, size_t(rows) * D);
  linear_input_grad(dpre, fc.subspan(o.fc.w1, size_t(F) * D), dxn, rows, D, F);
  linear_weight_grads(false, dpre, s.xn.span(), gfc.subspan(o.fc.w1, size_t(F) * D),
                      gfc.subspan(o.fc.b1, F), rows, D, F);
  prenorm_backward(sharding_, dxn, x, dy, p.subspan(o.g, D), s, t, dx, g.subspan(o.g, D),
                   g.subspan(o.b, D), ws);
}

void GptMlpBlock::rebuild_state(std::span<const float> /*p*/, std::span<const float> /*x*/,
                                int batch, LayerState& state) {
  auto& s = static_cast<GptMlpState&>(state);
  const size_t n = size_t(batch) * seq_ * hidden_;
  DTSIM_CHECK(s.selective && s.dgelu.size() == n);
  ensure_size(s.hid, s.ledger, n);
  // forward's own call on the same pre: the bits a non-selective forward saves.
  gelu_forward_keep_grad(s.dgelu.span(), s.hid.span(), s.dgelu.span());  // pre := gelu'(pre)
}

void GptMlpBlock::release_rebuilt(LayerState& state) {
  static_cast<GptMlpState&>(state).hid.release();
}

// ---- LayerNormLayer ----

LayerNormLayer::LayerNormLayer(std::string name, int seq, int dim, SequenceSharding sharding)
    : name_(std::move(name)),
      seq_(seq),
      dim_(dim),
      seq_local_(sharding.sequence_parallel() ? seq / sharding.size : seq),
      sharding_(std::move(sharding)) {
  DTSIM_CHECK(!sharding_.sequence_parallel() || seq % sharding_.size == 0);
}

void LayerNormLayer::add_params(ParamLayout& layout) const {
  layout.begin_layer(name_);
  layout.add(name_ + ".g", dim_, 1);
  layout.add(name_ + ".b", dim_, 1);
}

std::unique_ptr<LayerState> LayerNormLayer::make_state(MemoryLedger* ledger) const {
  return std::make_unique<NormState>(ledger);  // xn: the gathered input (sequence parallel)
}

void LayerNormLayer::forward(std::span<const float> p, std::span<const float> x, int batch,
                             std::span<float> y, LayerState& state, Workspace& ws) {
  auto& s = static_cast<NormState&>(state);
  const int rows = batch * seq_;
  ensure_size(s.mean, s.ledger, rows);
  ensure_size(s.rstd, s.ledger, rows);
  std::span<const float> in = x;
  if (sharding_.sequence_parallel()) {
    ensure_size(s.xn, s.ledger, size_t(rows) * dim_);
    gather_sequence(sharding_, x, s.xn.span(), {batch, seq_, seq_local_, dim_},
                    ws.take(5, size_t(rows) * dim_));
    in = s.xn.span();
  }
  layernorm_forward(in, p.first(dim_), p.subspan(dim_, dim_), y, s.mean.span(), s.rstd.span(), rows,
                    dim_);
}

void LayerNormLayer::backward(std::span<const float> p, std::span<const float> x,
                              std::span<const float> dy, const BackwardScale& scale,
                              std::span<float> g, std::span<float> dx, LayerState& state,
                              Workspace& ws) {
  auto& s = static_cast<NormState&>(state);
  const int rows = scale.batch * seq_;
  if (!sharding_.sequence_parallel()) {
    std::fill(dx.begin(), dx.end(), 0.0f);
    layernorm_backward(dy, x, p.first(dim_), s.mean.span(), s.rstd.span(), dx, g.first(dim_),
                       g.subspan(dim_, dim_), rows, dim_);
    return;
  }
  // The norm and everything after it are replicated: this rank's input rows of the full
  // input gradient are its own, without a collective.
  std::span<float> full = ws.take(4, size_t(rows) * dim_);
  std::fill(full.begin(), full.end(), 0.0f);
  layernorm_backward(dy, s.xn.span(), p.first(dim_), s.mean.span(), s.rstd.span(), full,
                     g.first(dim_), g.subspan(dim_, dim_), rows, dim_);
  if (!dx.empty()) slice_sequence(sharding_, full, dx, {scale.batch, seq_, seq_local_, dim_});
}

}  // namespace dtsim::model
