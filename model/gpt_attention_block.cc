// AttentionBlock (gpt_layers.h): pre-norm causal self-attention, plain or given a head
// shard and Megatron's f and g (gpt_regions.h).
#include <algorithm>
#include <cmath>

#include "model/attention.h"
#include "model/check.h"
#include "model/gpt_layers.h"
#include "model/gpt_regions.h"
#include "model/kernels.h"
#include "model/mlp_layers.h"

namespace dtsim::model {
namespace {

struct AttentionState : NormState {
  using NormState::NormState;
  TrackedBuffer<float> qkv, att, lse;  // (rows, 3E), (rows, E), (B, H, S)
};

// Offsets of ln.g, ln.b, qkv.w, qkv.b, proj.w, proj.b in the layer (E: this rank's).
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

AttentionBlock::AttentionBlock(std::string name, int seq, int dim, int heads, int head_dim,
                               SequenceSharding sharding, ContextRing cp)
    : name_(std::move(name)),
      seq_(seq),
      dim_(dim),
      heads_(heads / std::max(1, sharding.size)),
      head_dim_(head_dim),
      full_heads_(heads),
      seq_local_(sharding.sequence_parallel() ? seq / sharding.size : seq),
      sharding_(std::move(sharding)) {
  DTSIM_CHECK(seq > 0 && dim > 0 && heads > 0 && head_dim > 0 && head_dim <= kMaxHeadDim);
  DTSIM_CHECK(sharding_.size >= 1 && heads % sharding_.size == 0);
  DTSIM_CHECK(sharding_.rank >= 0 && sharding_.rank < sharding_.size);
  DTSIM_CHECK(sharding_.size == 1 || sharding_.reduce);
  DTSIM_CHECK(!sharding_.sequence_parallel() || seq % sharding_.size == 0);
  if (cp.active()) {
    const int full = seq * cp.size;
    ring_ = std::make_unique<RingAttention>(std::move(cp), full, heads_, head_dim);
  }
}

void AttentionBlock::add_params(ParamLayout& layout) const {
  const int D = dim_, E = full_heads_ * head_dim_, e = heads_ * head_dim_;
  const int e0 = sharding_.rank * e;  // this rank's first column of q, k and v
  layout.begin_layer(name_);
  layout.add(name_ + ".ln.g", D, 1);
  layout.add(name_ + ".ln.b", D, 1);
  if (e == E) {
    layout.add(name_ + ".qkv.w", 3 * E, D);
    layout.add(name_ + ".qkv.b", 3 * E, 1);
    layout.add(name_ + ".proj.w", D, E);
  } else {
    for (int k = 0; k < 3; ++k) {  // q, k, v rows of this rank's heads
      layout.add(name_ + ".qkv.w", e, D,
                 {.row0 = k * E + e0, .col0 = 0, .full_rows = 3 * E, .full_cols = D});
    }
    for (int k = 0; k < 3; ++k) {
      layout.add(name_ + ".qkv.b", e, 1,
                 {.row0 = k * E + e0, .col0 = 0, .full_rows = 3 * E, .full_cols = 1});
    }
    layout.add(name_ + ".proj.w", D, e, {.row0 = 0, .col0 = e0, .full_rows = D, .full_cols = E});
  }
  layout.add(name_ + ".proj.b", D, 1);
}

std::unique_ptr<LayerState> AttentionBlock::make_state(MemoryLedger* ledger) const {
  return std::make_unique<AttentionState>(ledger);
}

void AttentionBlock::forward(std::span<const float> p, std::span<const float> x, int batch,
                             std::span<float> y, LayerState& state, Workspace& ws) {
  auto& s = static_cast<AttentionState&>(state);
  const int D = dim_, E = heads_ * head_dim_, S = seq_, rows = batch * S;
  const TokenRows t{batch, S, seq_local_, D};
  const AttentionOffsets o(D, E);
  const bool sharded = static_cast<bool>(sharding_.reduce);
  prenorm_forward(sharding_, p.subspan(o.g, D), p.subspan(o.b, D), x, t, s, ws);
  ensure_size(s.qkv, s.ledger, size_t(rows) * 3 * E);
  ensure_size(s.lse, s.ledger, size_t(batch) * heads_ * S);
  linear_forward(s.xn.span(), p.subspan(o.wqkv, size_t(3) * E * D), p.subspan(o.bqkv, 3 * E),
                 s.qkv.span(), rows, D, 3 * E);
  std::span<float> att;  // selective: the output lives in the workspace only
  if (s.selective) {
    s.att.release();
    att = ws.take(0, size_t(rows) * E);
  } else {
    ensure_size(s.att, s.ledger, size_t(rows) * E);
    att = s.att.span();
  }
  run_attention(s, batch, att);
  // Row-parallel: the bias joins after g, once.
  std::span<float> core = core_output(sharding_, y, t, ws);
  linear_forward(att, p.subspan(o.wo, size_t(D) * E),
                 sharded ? std::span<const float>{} : p.subspan(o.bo, D), core, rows, E, D);
  block_output(sharding_, core, p.subspan(o.bo, D), x, t, y, ws);
}

void AttentionBlock::run_attention(LayerState& state, int batch, std::span<float> att) const {
  auto& s = static_cast<AttentionState&>(state);
  const int E = heads_ * head_dim_, S = seq_;
  if (ring_) {
    ring_->set_ledger(s.ledger);  // its scratch: activations of this stack
    ring_->forward(s.qkv.data(), batch, att.data(), s.lse.data());
    return;
  }
  const AttentionShape a{head_dim_, 1.0f / std::sqrt(float(head_dim_)), true};
  for (int b = 0; b < batch; ++b) {
    const float* qkv = s.qkv.data() + size_t(b) * S * 3 * E;
    for (int h = 0; h < heads_; ++h) {
      const int c = h * head_dim_;
      attention_forward(a, {qkv + c, 3 * E, S, 0}, {qkv + E + c, qkv + 2 * E + c, 3 * E, S, 0},
                        att.data() + size_t(b) * S * E + c, E,
                        s.lse.data() + (size_t(b) * heads_ + h) * S);
    }
  }
}

void AttentionBlock::rebuild_state(std::span<const float> /*p*/, std::span<const float> /*x*/,
                                   int batch, LayerState& state) {
  auto& s = static_cast<AttentionState&>(state);
  const size_t n = size_t(batch) * seq_ * heads_ * head_dim_;
  DTSIM_CHECK(s.selective && s.qkv.size() == 3 * n);
  ensure_size(s.att, s.ledger, n);
  run_attention(s, batch, s.att.span());  // forward's own calls: the same bits (and LSE)
}

void AttentionBlock::release_rebuilt(LayerState& state) {
  static_cast<AttentionState&>(state).att.release();
}

void AttentionBlock::backward(std::span<const float> p, std::span<const float> x,
                              std::span<const float> dy, const BackwardScale& scale,
                              std::span<float> g, std::span<float> dx, LayerState& state,
                              Workspace& ws) {
  auto& s = static_cast<AttentionState&>(state);
  const int D = dim_, E = heads_ * head_dim_, S = seq_, batch = scale.batch, rows = batch * S;
  const TokenRows t{batch, S, seq_local_, D};
  const AttentionOffsets o(D, E);
  std::span<const float> dyf = full_output_grad(sharding_, dy, t, ws);
  std::span<float> datt = ws.take(0, size_t(rows) * E);
  linear_input_grad(dyf, p.subspan(o.wo, size_t(D) * E), datt, rows, E, D);
  linear_weight_grads(false, dyf, s.att.span(), g.subspan(o.wo, size_t(D) * E), g.subspan(o.bo, D),
                      rows, E, D);
  std::span<float> dqkv = ws.take(1, size_t(rows) * 3 * E);
  std::fill(dqkv.begin(), dqkv.end(), 0.0f);
  std::span<float> delta = ws.take(3, S);
  const AttentionShape a{head_dim_, 1.0f / std::sqrt(float(head_dim_)), true};
  if (ring_) {
    ring_->set_ledger(s.ledger);
    ring_->backward(s.qkv.data(), s.att.data(), datt.data(), s.lse.data(), batch, dqkv.data());
  }
  for (int b = 0; !ring_ && b < batch; ++b) {
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
  prenorm_backward(sharding_, dxn, x, dy, p.subspan(o.g, D), s, t, dx, g.subspan(o.g, D),
                   g.subspan(o.b, D), ws);
}

}  // namespace dtsim::model
