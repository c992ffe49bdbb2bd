#include "model/moe_layer.h"

#include <algorithm>
#include <string>
#include <type_traits>

#include "model/check.h"
#include "model/kernels.h"

namespace dtsim::model {
namespace {

std::span<const float> router_weights(std::span<const float> params, const MoeConfig& c) {
  DTSIM_CHECK(params.size() == moe_layer_size(c));
  return params.first(moe_router_size(c));
}

ExpertWeights expert_at(std::span<const float> params, int e, const MoeConfig& c) {
  const size_t n = moe_expert_size(c);
  return expert_weights(params.subspan(moe_router_size(c) + e * n, n), c);
}

ExpertGrads expert_grads_at(std::span<float> grads, int e, const MoeConfig& c) {
  const size_t n = moe_expert_size(c);
  return expert_grads(grads.subspan(moe_router_size(c) + e * n, n), c);
}

// Router and aux-loss backward shared by both paths, given the gate gradient (T, k);
// d_probs is a workspace, resized and zeroed here.
void backward_router(std::span<const float> h, std::span<const float> params, const Routing& r,
                     const MoeConfig& c, std::span<const float> d_gate, float aux_scale,
                     std::span<float> grads, std::span<float> dh, std::vector<float>& d_probs) {
  d_probs.assign(size_t(r.tokens) * r.num_experts, 0.0f);  // (T, E)
  gate_backward(r, d_gate, d_probs);
  aux_loss_backward(r, c.aux_alpha, aux_scale, d_probs);
  router_backward(h, router_weights(params, c), r, d_probs, grads.first(moe_router_size(c)), dh,
                  c.d_model);
}

}  // namespace

MoeLayer::MoeLayer(const MoeConfig& config, ExpertSharding sharding, ExpertExchange* exchange)
    : config_(config),
      sharding_(std::move(sharding)),
      exchange_(exchange),
      rank_(exchange ? exchange->rank() : 0),
      size_(exchange ? exchange->size() : 1),
      local_experts_(config.num_experts / size_),
      zero_b2_(config.d_model, 0.0f) {
  DTSIM_CHECK(size_ >= 1 && rank_ >= 0 && rank_ < size_);
  DTSIM_CHECK(config.num_experts % size_ == 0);
}

size_t MoeLayer::local_expert_params() const {
  return size_t(local_experts_) * moe_expert_size(config_);
}

ExpertWeights MoeLayer::expert(std::span<const float> experts, int e) const {
  const size_t n = moe_expert_size(config_);
  ExpertWeights w = expert_weights(experts.subspan(e * n, n), config_);
  if (sharding_.rank != 0) w.b2 = zero_b2_;
  return w;
}

float MoeLayer::forward(std::span<const float> params, std::span<const float> h, int tokens,
                        std::span<float> y) {
  const size_t rs = moe_router_size(config_);
  DTSIM_CHECK(params.size() == rs + local_expert_params());
  return forward(params.first(rs), params.subspan(rs), h, tokens, y);
}

float MoeLayer::forward(std::span<const float> router, std::span<const float> experts,
                        std::span<const float> h, int tokens, std::span<float> y) {
  const MoeConfig& c = config_;
  const int D = c.d_model, n = size_, m = local_experts_;
  DTSIM_CHECK(router.size() == moe_router_size(c) && experts.size() == local_expert_params());
  h_ = h.first(size_t(tokens) * D);
  routing_ = router_forward(h_, router, tokens, c);
  grouped_in_.resize(size_t(routing_.rows()) * D);
  grouped_out_.resize(size_t(routing_.rows()) * D);
  dispatch_forward(h_, routing_, D, grouped_in_);

  // The segments: rows per (source, local expert), source-major. Without an exchange, this
  // rank's own counts and offsets.
  recv_rows_.assign(size_t(n) * m, 0);
  segment_begin_.assign(size_t(n) * m, 0);
  if (exchanges()) {
    // Rank j learns how many rows each source sends to each of its experts (the split sizes
    // of the row all_to_all).
    static_assert(std::is_same_v<int, int32_t>);
    exchange_->exchange_counts(routing_.counts, recv_rows_);  // counts: (E)
  } else {
    std::copy(routing_.counts.begin(), routing_.counts.end(), recv_rows_.begin());
  }
  send_counts_.assign(n, 0);
  recv_counts_.assign(n, 0);
  size_t rows = 0;  // of the experts' input so far, source-major
  for (int j = 0; j < n; ++j) {
    send_counts_[j] = size_t(routing_.offsets[(j + 1) * m] - routing_.offsets[j * m]) * D;
    for (int e = 0; e < m; ++e) {
      segment_begin_[size_t(j) * m + e] = rows;
      rows += size_t(segment_rows(j, e));
      recv_counts_[j] += size_t(segment_rows(j, e)) * D;
    }
  }
  if (exchanges()) {  // tokens to the experts' ranks
    expert_in_.resize(rows * D);
    expert_out_.resize(rows * D);
    exchange_->exchange_rows(grouped_in_, send_counts_, expert_in_, recv_counts_);
  }
  const std::span<const float> in = expert_in();
  const std::span<float> out = expert_out();
  acts_.resize(size_t(n) * m);
  for (int i = 0; i < n; ++i) {  // each local expert on each source's rows
    for (int e = 0; e < m; ++e) {
      const size_t begin = segment_begin(i, e) * D, len = size_t(segment_rows(i, e)) * D;
      expert_forward(expert(experts, e), in.subspan(begin, len), segment_rows(i, e), c,
                     acts_[size_t(i) * m + e], out.subspan(begin, len));
    }
  }
  if (sharding_.size > 1) sharding_.reduce(out);  // g: the partial outputs summed
  // Outputs back to the tokens' ranks (the reverse split).
  if (exchanges()) exchange_->exchange_rows(expert_out_, recv_counts_, grouped_out_, send_counts_);
  combine_forward(h_, grouped_out_, routing_, D, y);
  return aux_loss_forward(routing_, c.aux_alpha);
}

void MoeLayer::backward(std::span<const float> params, std::span<const float> dy, float aux_scale,
                        std::span<float> grads, std::span<float> dh) {
  backward_input(params, dy, aux_scale, dh);
  backward_weight(grads);
}

void MoeLayer::backward_input(std::span<const float> params, std::span<const float> dy,
                              float aux_scale, std::span<float> dh) {
  const size_t rs = moe_router_size(config_);
  DTSIM_CHECK(params.size() == rs + local_expert_params());
  backward_input(params.first(rs), params.subspan(rs), dy, aux_scale, dh);
}

void MoeLayer::backward_input(std::span<const float> router, std::span<const float> experts,
                              std::span<const float> dy, float aux_scale, std::span<float> dh) {
  const MoeConfig& c = config_;
  const int D = c.d_model, F = c.d_ff, n = size_, m = local_experts_;
  const Routing& r = routing_;
  d_grouped_out_.assign(size_t(r.rows()) * D, 0.0f);
  d_grouped_in_.resize(size_t(r.rows()) * D);
  d_gate_.assign(size_t(r.tokens) * r.top_k, 0.0f);
  combine_backward(dy, grouped_out_, r, D, dh, d_grouped_out_, d_gate_);

  // Output gradients to the experts' ranks, expert backward per source, input gradients back.
  if (exchanges()) {
    d_out_.resize(expert_out_.size());
    d_in_.resize(expert_in_.size());
    exchange_->exchange_rows(d_grouped_out_, send_counts_, d_out_, recv_counts_);
  }
  const std::span<const float> in = expert_in(), d_out = d_expert_out();
  const std::span<float> d_in = d_expert_in();
  std::fill(d_in.begin(), d_in.end(), 0.0f);
  d_pre_.resize(in.size() / D * F);
  d_hid_.resize(size_t(*std::max_element(recv_rows_.begin(), recv_rows_.end())) * F);
  for (int i = 0; i < n; ++i) {
    for (int e = 0; e < m; ++e) {
      const size_t begin = segment_begin(i, e), rows = size_t(segment_rows(i, e));
      expert_backward_input(
          expert(experts, e), in.subspan(begin * D, rows * D), acts_[size_t(i) * m + e],
          d_out.subspan(begin * D, rows * D), segment_rows(i, e), c, d_hid_,
          std::span(d_pre_).subspan(begin * F, rows * F), d_in.subspan(begin * D, rows * D));
    }
  }
  if (sharding_.size > 1) sharding_.reduce(d_in);  // f's backward: the partial dx summed
  if (exchanges()) exchange_->exchange_rows(d_in_, recv_counts_, d_grouped_in_, send_counts_);
  dispatch_backward(d_grouped_in_, r, D, dh);

  // The router's backward is local: gates, aux loss, softmax, router weights.
  d_probs_.assign(size_t(r.tokens) * r.num_experts, 0.0f);
  d_logits_.resize(d_probs_.size());
  gate_backward(r, d_gate_, d_probs_);
  aux_loss_backward(r, c.aux_alpha, aux_scale, d_probs_);
  router_backward_input(h_, router, r, d_probs_, d_logits_, dh, D);
  weight_pending_ = true;
}

void MoeLayer::backward_weight(std::span<float> grads) {
  const size_t rs = moe_router_size(config_);
  DTSIM_CHECK(grads.size() == rs + local_expert_params());
  targets_.assign(size_, grads.subspan(rs));
  backward_weight(grads.first(rs), targets_);
}

void MoeLayer::backward_weight(std::span<float> d_router,
                               std::span<const std::span<float>> d_experts) {
  const MoeConfig& c = config_;
  const int D = c.d_model, F = c.d_ff, n = size_, m = local_experts_;
  const size_t es = moe_expert_size(c);
  DTSIM_CHECK(weight_pending_ && d_experts.size() == size_t(n));
  for (std::span<float> d : d_experts) DTSIM_CHECK(d.size() == local_expert_params());
  const std::span<const float> in = expert_in(), d_out = d_expert_out();
  for (int i = 0; i < n; ++i) {
    for (int e = 0; e < m; ++e) {
      const size_t begin = segment_begin(i, e), rows = size_t(segment_rows(i, e));
      expert_backward_weight(in.subspan(begin * D, rows * D), acts_[size_t(i) * m + e],
                             d_out.subspan(begin * D, rows * D),
                             std::span(d_pre_).subspan(begin * F, rows * F), segment_rows(i, e), c,
                             expert_grads(d_experts[i].subspan(e * es, es), c));
    }
  }
  router_backward_weight(h_, routing_, d_logits_, d_router, D);
  weight_pending_ = false;
}

void MoeLayer::drop_hidden() {
  for (ExpertActivations& a : acts_) std::vector<float>().swap(a.hid);
}

void MoeLayer::rebuild_hidden() {
  for (ExpertActivations& a : acts_) {
    a.hid.resize(a.pre.size());
    if (!a.pre.empty()) gelu_forward(a.pre, a.hid);  // expert_forward's own call
  }
}

size_t MoeLayer::activation_bytes() const {
  size_t n = grouped_in_.size() + grouped_out_.size() + routing_.probs.size() + expert_in_.size() +
             expert_out_.size();
  for (const ExpertActivations& a : acts_) n += a.pre.size() + a.hid.size();
  if (weight_pending_) {
    n += (exchanges() ? d_out_ : d_grouped_out_).size() + d_pre_.size() + d_logits_.size();
  }
  return n * sizeof(float);
}

namespace {
MoeConfig local_config(MoeConfig c, int shards) {
  DTSIM_CHECK(shards >= 1 && c.d_ff % shards == 0);
  c.d_ff /= shards;
  return c;
}
}  // namespace

MoeBlock::MoeBlock(const MoeConfig& config, std::string name, ExpertSharding sharding)
    : config_(local_config(config, sharding.size)),
      full_d_ff_(config.d_ff),
      name_(std::move(name)),
      sharding_(std::move(sharding)) {
  DTSIM_CHECK(sharding_.size == 1 || sharding_.reduce);
}

void MoeBlock::add_params(ParamLayout& layout) const {
  const MoeConfig& m = config_;
  layout.begin_layer(name_);
  layout.add(name_ + ".router", m.num_experts, m.d_model);
  for (int e = 0; e < m.num_experts; ++e) {
    add_sharded_ffn_params(layout, name_ + ".expert" + std::to_string(e), m.d_model, m.d_ff,
                           full_d_ff_, sharding_.rank);
  }
}

std::unique_ptr<LayerState> MoeBlock::make_state(MemoryLedger* ledger) const {
  return std::make_unique<State>(config_, sharding_, nullptr, ledger);
}

MoeBlock::State::~State() {
  if (ledger != nullptr) ledger->add(MemoryCategory::kActivations, -recorded);
}

void MoeBlock::State::record() {
  const int64_t bytes = static_cast<int64_t>(layer.activation_bytes());
  if (ledger != nullptr) ledger->add(MemoryCategory::kActivations, bytes - recorded);
  recorded = bytes;
}

void MoeBlock::forward(std::span<const float> params, std::span<const float> x, int batch,
                       std::span<float> y, LayerState& state, Workspace& /*ws*/) {
  auto& s = static_cast<State&>(state);
  s.aux_loss = s.layer.forward(params, x, batch, y);
  s.record();  // with the GELU outputs: the peak saw them
  if (s.selective) {
    s.layer.drop_hidden();
    s.record();
  }
}

void MoeBlock::rebuild_state(std::span<const float> /*params*/, std::span<const float> /*x*/,
                             int /*batch*/, LayerState& state) {
  auto& s = static_cast<State&>(state);
  s.layer.rebuild_hidden();
  s.record();
}

void MoeBlock::release_rebuilt(LayerState& state) {
  auto& s = static_cast<State&>(state);
  s.layer.drop_hidden();
  s.record();
}

void MoeBlock::backward(std::span<const float> params, std::span<const float> x,
                        std::span<const float> dy, const BackwardScale& scale,
                        std::span<float> grads, std::span<float> dx, LayerState& state,
                        Workspace& ws) {
  auto& s = static_cast<State&>(state);
  if (dx.empty()) dx = ws.take(0, x.size());  // MoeLayer always computes it
  std::fill(dx.begin(), dx.end(), 0.0f);
  s.layer.backward(params, dy, scale.grad_scale * static_cast<float>(scale.batch), grads, dx);
}

void MoeBlock::backward_input(std::span<const float> params, std::span<const float> x,
                              std::span<const float> dy, const BackwardScale& scale,
                              std::span<float> dx, LayerState& state, Workspace& ws) {
  auto& s = static_cast<State&>(state);
  if (dx.empty()) dx = ws.take(0, x.size());  // MoeLayer always computes it
  std::fill(dx.begin(), dx.end(), 0.0f);
  s.layer.backward_input(params, dy, scale.grad_scale * static_cast<float>(scale.batch), dx);
  s.record();  // with the gradients kept for backward_weight
}

void MoeBlock::backward_weight(std::span<const float> /*x*/, const BackwardScale& /*scale*/,
                               std::span<float> grads, LayerState& state, Workspace& /*ws*/) {
  auto& s = static_cast<State&>(state);
  s.layer.backward_weight(grads);
  s.record();
}

float DenseMoeReference::forward(std::span<const float> params, std::span<const float> h,
                                 int tokens, std::span<float> y) {
  const MoeConfig& c = config_;
  const int D = c.d_model, E = c.num_experts, T = tokens, K = c.top_k;
  h_ = h.first(size_t(T) * D);
  routing_ = router_forward(h_, router_weights(params, c), T, c);
  gates_.assign(size_t(T) * E, 0.0f);
  for (int t = 0; t < T; ++t) {
    for (int j = 0; j < K; ++j) {
      const size_t s = size_t(t) * K + j;
      if (routing_.row[s] >= 0) gates_[size_t(t) * E + routing_.expert[s]] = routing_.gate[s];
    }
  }
  outs_.resize(size_t(E) * T * D);
  acts_.resize(E);
  const size_t td = size_t(T) * D;
  for (int e = 0; e < E; ++e) {
    expert_forward(expert_at(params, e, c), h_, T, c, acts_[e],
                   std::span(outs_).subspan(e * td, td));
  }
  std::copy(h_.begin(), h_.end(), y.begin());
  for (int t = 0; t < T; ++t) {
    for (int e = 0; e < E; ++e) {
      const float g = gates_[size_t(t) * E + e];
      const float* out = &outs_[e * td + size_t(t) * D];
      for (int d = 0; d < D; ++d) y[size_t(t) * D + d] += g * out[d];
    }
  }
  return aux_loss_forward(routing_, c.aux_alpha);
}

void DenseMoeReference::backward(std::span<const float> params, std::span<const float> dy,
                                 float aux_scale, std::span<float> grads, std::span<float> dh) {
  const MoeConfig& c = config_;
  const int D = c.d_model, E = c.num_experts, T = routing_.tokens, K = c.top_k;
  const size_t td = size_t(T) * D;
  for (size_t i = 0; i < td; ++i) dh[i] += dy[i];   // residual
  std::vector<float> d_gates(size_t(T) * E, 0.0f);  // (T, E)
  std::vector<float> d_out(td);                     // (T, D) for one expert
  for (int e = 0; e < E; ++e) {
    const float* out = &outs_[e * td];
    for (int t = 0; t < T; ++t) {
      const float g = gates_[size_t(t) * E + e];
      float dot = 0.0f;
      for (int d = 0; d < D; ++d) {
        d_out[size_t(t) * D + d] = g * dy[size_t(t) * D + d];
        dot += dy[size_t(t) * D + d] * out[size_t(t) * D + d];
      }
      d_gates[size_t(t) * E + e] = dot;
    }
    expert_backward(expert_at(params, e, c), h_, acts_[e], d_out, T, c,
                    expert_grads_at(grads, e, c), dh);
  }
  std::vector<float> d_gate(size_t(T) * K, 0.0f);  // (T, k): only kept slots carry a gradient
  for (int t = 0; t < T; ++t) {
    for (int j = 0; j < K; ++j) {
      const size_t s = size_t(t) * K + j;
      if (routing_.row[s] >= 0) d_gate[s] = d_gates[size_t(t) * E + routing_.expert[s]];
    }
  }
  std::vector<float> d_probs;  // (T, E)
  backward_router(h_, params, routing_, c, d_gate, aux_scale, grads, dh, d_probs);
}

}  // namespace dtsim::model
