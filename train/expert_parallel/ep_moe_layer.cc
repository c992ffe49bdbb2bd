#include "train/expert_parallel/ep_moe_layer.h"

#include <algorithm>

#include <string>

#include "model/check.h"
#include "model/mlp_layers.h"

namespace dtsim::train {

EpMoeLayer::EpMoeLayer(const model::MoeConfig& config, int ep_rank, int ep_size)
    : config_(config),
      ep_rank_(ep_rank),
      ep_size_(ep_size),
      local_experts_(config.num_experts / ep_size) {
  DTSIM_CHECK(ep_size >= 1 && ep_rank >= 0 && ep_rank < ep_size);
  DTSIM_CHECK(config.num_experts % ep_size == 0);
}

size_t EpMoeLayer::local_expert_params() const {
  return size_t(local_experts_) * model::moe_expert_size(config_);
}

void EpMoeLayer::to_expert_major(std::span<const float> received, std::span<float> grouped) const {
  const size_t D = config_.d_model;
  const int n = ep_size_, m = local_experts_;
  size_t src = 0;  // row in the received (source-major) layout
  std::vector<int> next(expert_offsets_.begin(), expert_offsets_.end() - 1);
  for (int i = 0; i < n; ++i) {
    for (int e = 0; e < m; ++e) {
      const size_t rows = recv_rows_[size_t(i) * m + e];
      std::copy_n(received.begin() + src * D, rows * D, grouped.begin() + size_t(next[e]) * D);
      next[e] += static_cast<int>(rows);
      src += rows;
    }
  }
}

void EpMoeLayer::from_expert_major(std::span<const float> grouped,
                                   std::span<float> received) const {
  const size_t D = config_.d_model;
  const int n = ep_size_, m = local_experts_;
  size_t dst = 0;
  std::vector<int> next(expert_offsets_.begin(), expert_offsets_.end() - 1);
  for (int i = 0; i < n; ++i) {
    for (int e = 0; e < m; ++e) {
      const size_t rows = recv_rows_[size_t(i) * m + e];
      std::copy_n(grouped.begin() + size_t(next[e]) * D, rows * D, received.begin() + dst * D);
      next[e] += static_cast<int>(rows);
      dst += rows;
    }
  }
}

float EpMoeLayer::forward(std::span<const float> router, std::span<const float> experts,
                          std::span<const float> h, int tokens, std::span<float> y,
                          TracedComm& comm) {
  const model::MoeConfig& c = config_;
  const int D = c.d_model, n = ep_size_, m = local_experts_;
  DTSIM_CHECK(comm.size() == n && comm.rank() == ep_rank_);
  DTSIM_CHECK(experts.size() == local_expert_params());
  h_ = h.first(size_t(tokens) * D);
  routing_ = model::router_forward(h_, router, tokens, c);
  grouped_in_.resize(size_t(routing_.rows()) * D);
  grouped_out_.resize(size_t(routing_.rows()) * D);
  model::dispatch_forward(h_, routing_, D, grouped_in_);

  // Exchange the per-expert row counts: rank j learns how many rows each source sends to
  // each of its experts (the split sizes of the token all_to_all).
  std::vector<int32_t> counts(routing_.counts.begin(), routing_.counts.end());  // (E)
  recv_rows_.assign(size_t(n) * m, 0);
  comm.all_to_all(std::span<const int32_t>(counts), std::span<int32_t>(recv_rows_));
  send_counts_.assign(n, 0);
  recv_counts_.assign(n, 0);
  expert_offsets_.assign(m + 1, 0);
  for (int j = 0; j < n; ++j) {
    send_counts_[j] = size_t(routing_.offsets[(j + 1) * m] - routing_.offsets[j * m]) * D;
    for (int e = 0; e < m; ++e) {
      recv_counts_[j] += size_t(recv_rows_[size_t(j) * m + e]) * D;
      expert_offsets_[e + 1] += recv_rows_[size_t(j) * m + e];
    }
  }
  for (int e = 0; e < m; ++e) expert_offsets_[e + 1] += expert_offsets_[e];
  const size_t received = size_t(expert_offsets_[m]) * D;
  recv_buf_.resize(received);
  expert_in_.resize(received);
  expert_out_.resize(received);

  // Tokens to the experts' ranks; run each local expert once on all of its rows.
  comm.all_to_all_single(std::span<const float>(grouped_in_), std::span<const size_t>(send_counts_),
                         std::span<float>(recv_buf_), std::span<const size_t>(recv_counts_));
  to_expert_major(recv_buf_, expert_in_);
  acts_.resize(m);
  const size_t es = model::moe_expert_size(c);
  for (int e = 0; e < m; ++e) {
    const size_t begin = size_t(expert_offsets_[e]) * D;
    const int rows = expert_offsets_[e + 1] - expert_offsets_[e];
    model::expert_forward(model::expert_weights(experts.subspan(e * es, es), c),
                          std::span(expert_in_).subspan(begin, size_t(rows) * D), rows, c, acts_[e],
                          std::span(expert_out_).subspan(begin, size_t(rows) * D));
  }
  // Outputs back to the tokens' ranks (the reverse split), then the gate-weighted sum.
  from_expert_major(expert_out_, recv_buf_);
  comm.all_to_all_single(std::span<const float>(recv_buf_), std::span<const size_t>(recv_counts_),
                         std::span<float>(grouped_out_), std::span<const size_t>(send_counts_));
  model::combine_forward(h_, grouped_out_, routing_, D, y);
  return model::aux_loss_forward(routing_, c.aux_alpha);
}

void EpMoeLayer::backward(std::span<const float> router, std::span<const float> experts,
                          std::span<const float> dy, float aux_scale, std::span<float> d_router,
                          std::span<float> d_experts, std::span<float> dh, TracedComm& comm) {
  const model::MoeConfig& c = config_;
  const int D = c.d_model, m = local_experts_;
  const model::Routing& r = routing_;
  DTSIM_CHECK(d_experts.size() == local_expert_params());
  d_grouped_.assign(size_t(r.rows()) * D, 0.0f);
  d_gate_.assign(size_t(r.tokens) * r.top_k, 0.0f);
  model::combine_backward(dy, grouped_out_, r, D, dh, d_grouped_, d_gate_);

  // Output gradients to the experts' ranks, expert backward, input gradients back.
  comm.all_to_all_single(std::span<const float>(d_grouped_), std::span<const size_t>(send_counts_),
                         std::span<float>(recv_buf_), std::span<const size_t>(recv_counts_));
  d_out_.resize(expert_out_.size());
  d_in_.assign(expert_in_.size(), 0.0f);
  to_expert_major(recv_buf_, d_out_);
  const size_t es = model::moe_expert_size(c);
  for (int e = 0; e < m; ++e) {
    const size_t begin = size_t(expert_offsets_[e]) * D;
    const int rows = expert_offsets_[e + 1] - expert_offsets_[e];
    const size_t len = size_t(rows) * D;
    model::expert_backward(model::expert_weights(experts.subspan(e * es, es), c),
                           std::span(expert_in_).subspan(begin, len), acts_[e],
                           std::span(d_out_).subspan(begin, len), rows, c,
                           model::expert_grads(d_experts.subspan(e * es, es), c),
                           std::span(d_in_).subspan(begin, len));
  }
  from_expert_major(d_in_, recv_buf_);
  std::fill(d_grouped_.begin(), d_grouped_.end(), 0.0f);
  comm.all_to_all_single(std::span<const float>(recv_buf_), std::span<const size_t>(recv_counts_),
                         std::span<float>(d_grouped_), std::span<const size_t>(send_counts_));
  model::dispatch_backward(d_grouped_, r, D, dh);

  // The router's backward is local: gates, aux loss, softmax, router weights.
  d_probs_.assign(size_t(r.tokens) * r.num_experts, 0.0f);
  model::gate_backward(r, d_gate_, d_probs_);
  model::aux_loss_backward(r, c.aux_alpha, aux_scale, d_probs_);
  model::router_backward(h_, router, r, d_probs_, d_router, dh, D);
}

size_t EpMoeLayer::activation_bytes() const {
  size_t n = grouped_in_.size() + grouped_out_.size() + routing_.probs.size() + recv_buf_.size() +
             expert_in_.size() + expert_out_.size();
  for (const model::ExpertActivations& a : acts_) n += a.pre.size() + a.hid.size();
  return n * sizeof(float);
}

namespace {

// One micro-batch's EpMoeLayer and the activation bytes it has recorded.
struct EpMoeState : model::LayerState {
  EpMoeState(const model::MoeConfig& c, int rank, int size, model::MemoryLedger* ledger)
      : layer(c, rank, size), ledger(ledger) {}
  ~EpMoeState() override {
    if (ledger != nullptr) ledger->add(model::MemoryCategory::kActivations, -recorded);
  }
  EpMoeLayer layer;
  model::MemoryLedger* ledger;
  int64_t recorded = 0;
};

}  // namespace

void EpMoeBlock::add_params(model::ParamLayout& layout) const {
  const model::MoeConfig& m = config_;
  const int count = m.num_experts / ep_size_, first = ep_rank_ * count;
  layout.begin_layer(name_);
  layout.add(name_ + ".router", m.num_experts, m.d_model);
  for (int e = first; e < first + count; ++e) {
    const std::string p = name_ + ".expert" + std::to_string(e);
    layout.add(p + ".w1", m.d_ff, m.d_model);
    layout.add(p + ".b1", m.d_ff, 1);
    layout.add(p + ".w2", m.d_model, m.d_ff);
    layout.add(p + ".b2", m.d_model, 1);
  }
}

std::unique_ptr<model::LayerState> EpMoeBlock::make_state(model::MemoryLedger* ledger) const {
  return std::make_unique<EpMoeState>(config_, ep_rank_, ep_size_, ledger);
}

void EpMoeBlock::forward(std::span<const float> p, std::span<const float> x, int batch,
                         std::span<float> y, model::LayerState& state, model::Workspace& /*ws*/) {
  auto& s = static_cast<EpMoeState&>(state);
  const size_t rs = model::moe_router_size(config_);
  s.layer.forward(p.first(rs), p.subspan(rs), x, batch, y, *ep_);
  const int64_t bytes = static_cast<int64_t>(s.layer.activation_bytes());
  if (s.ledger != nullptr) s.ledger->add(model::MemoryCategory::kActivations, bytes - s.recorded);
  s.recorded = bytes;
}

void EpMoeBlock::backward(std::span<const float> p, std::span<const float> x,
                          std::span<const float> dy, const model::BackwardScale& scale,
                          std::span<float> g, std::span<float> dx, model::LayerState& state,
                          model::Workspace& ws) {
  auto& s = static_cast<EpMoeState&>(state);
  const size_t rs = model::moe_router_size(config_);
  if (dx.empty()) dx = ws.take(0, x.size());  // the layer always computes it
  std::fill(dx.begin(), dx.end(), 0.0f);
  s.layer.backward(p.first(rs), p.subspan(rs), dy, scale.grad_scale * float(scale.batch),
                   g.first(rs), g.subspan(rs), dx, *ep_);
}

EpParamSplit ep_param_split(const model::ParamLayout& layout, const model::MoeConfig& config) {
  std::vector<model::ParamRange> embed, head, routers;
  EpParamSplit split;
  for (int l = 0; l < layout.num_layers(); ++l) {
    const model::ParamRange r = layout.layer_range(l);
    if (layout.layer_name(l) == "embed") {
      embed.push_back(r);
    } else if (layout.layer_name(l) == "head") {
      head.push_back(r);
    } else {  // an MoE layer: its router, then its experts
      const size_t end = r.begin + model::moe_router_size(config);
      routers.push_back({r.begin, end});
      split.experts.push_back({end, r.end});
    }
  }
  for (const auto* part : {&embed, &head, &routers}) {
    split.replicated.insert(split.replicated.end(), part->begin(), part->end());
  }
  return split;
}

model::Layers ep_moe_model_layers(const model::MoeModelConfig& c, int ep_rank, int ep_size,
                                  TracedComm* ep) {
  model::Layers layers;
  layers.push_back(std::make_unique<model::Linear>("embed", c.input_dim, c.moe.d_model));
  for (int l = 0; l < c.num_blocks; ++l) {
    layers.push_back(std::make_unique<EpMoeBlock>(c.moe, ep_rank, ep_size, ep,
                                                  model::moe_block_name(l, c.num_blocks)));
  }
  layers.push_back(std::make_unique<model::Linear>("head", c.moe.d_model, c.num_classes));
  return layers;
}

}  // namespace dtsim::train
