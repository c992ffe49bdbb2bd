#include "train/expert_parallel/ep_moe_layer.h"

#include <algorithm>

#include <string>

#include "model/check.h"
#include "model/kernels.h"
#include "model/mlp_layers.h"
#include "train/grad_ops.h"

namespace dtsim::train {

EpMoeLayer::EpMoeLayer(const model::MoeConfig& config, int ep_rank, int ep_size,
                       model::ExpertSharding sharding)
    : config_(config),
      ep_rank_(ep_rank),
      ep_size_(ep_size),
      local_experts_(config.num_experts / ep_size),
      sharding_(std::move(sharding)),
      zero_b2_(config.d_model, 0.0f) {
  DTSIM_CHECK(ep_size >= 1 && ep_rank >= 0 && ep_rank < ep_size);
  DTSIM_CHECK(config.num_experts % ep_size == 0);
}

model::ExpertWeights EpMoeLayer::expert(std::span<const float> experts, int e) const {
  const size_t es = model::moe_expert_size(config_);
  model::ExpertWeights w = model::expert_weights(experts.subspan(e * es, es), config_);
  if (sharding_.rank != 0) w.b2 = zero_b2_;
  return w;
}

size_t EpMoeLayer::local_expert_params() const {
  return size_t(local_experts_) * model::moe_expert_size(config_);
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
  segment_begin_.assign(size_t(n) * m, 0);
  size_t rows = 0;  // received so far, source-major
  for (int j = 0; j < n; ++j) {
    send_counts_[j] = size_t(routing_.offsets[(j + 1) * m] - routing_.offsets[j * m]) * D;
    for (int e = 0; e < m; ++e) {
      segment_begin_[size_t(j) * m + e] = rows;
      rows += size_t(segment_rows(j, e));
      recv_counts_[j] += size_t(segment_rows(j, e)) * D;
    }
  }
  expert_in_.resize(rows * D);
  expert_out_.resize(rows * D);

  // Tokens to the experts' ranks; each local expert runs on each source's rows.
  comm.all_to_all_single(std::span<const float>(grouped_in_), std::span<const size_t>(send_counts_),
                         std::span<float>(expert_in_), std::span<const size_t>(recv_counts_));
  acts_.resize(size_t(n) * m);
  for (int i = 0; i < n; ++i) {
    for (int e = 0; e < m; ++e) {
      const size_t begin = segment_begin(i, e) * D, len = size_t(segment_rows(i, e)) * D;
      model::expert_forward(expert(experts, e), std::span(expert_in_).subspan(begin, len),
                            segment_rows(i, e), c, acts_[size_t(i) * m + e],
                            std::span(expert_out_).subspan(begin, len));
    }
  }
  if (sharding_.size > 1) sharding_.reduce(expert_out_);  // g: the partial outputs summed
  // Outputs back to the tokens' ranks (the reverse split), then the gate-weighted sum.
  comm.all_to_all_single(std::span<const float>(expert_out_), std::span<const size_t>(recv_counts_),
                         std::span<float>(grouped_out_), std::span<const size_t>(send_counts_));
  model::combine_forward(h_, grouped_out_, routing_, D, y);
  return model::aux_loss_forward(routing_, c.aux_alpha);
}

void EpMoeLayer::backward(std::span<const float> router, std::span<const float> experts,
                          std::span<const float> dy, float aux_scale, std::span<float> d_router,
                          std::span<const std::span<float>> d_experts, std::span<float> dh,
                          TracedComm& comm) {
  backward_input(router, experts, dy, aux_scale, dh, comm);
  backward_weight(d_router, d_experts);
}

void EpMoeLayer::backward_input(std::span<const float> router, std::span<const float> experts,
                                std::span<const float> dy, float aux_scale, std::span<float> dh,
                                TracedComm& comm) {
  const model::MoeConfig& c = config_;
  const int D = c.d_model, F = c.d_ff, n = ep_size_, m = local_experts_;
  const model::Routing& r = routing_;
  d_grouped_.assign(size_t(r.rows()) * D, 0.0f);
  d_gate_.assign(size_t(r.tokens) * r.top_k, 0.0f);
  model::combine_backward(dy, grouped_out_, r, D, dh, d_grouped_, d_gate_);

  // Output gradients to the experts' ranks, expert backward per source, input gradients back.
  d_out_.resize(expert_out_.size());
  d_in_.assign(expert_in_.size(), 0.0f);
  d_pre_.resize(expert_in_.size() / D * F);
  d_hid_.resize(size_t(*std::max_element(recv_rows_.begin(), recv_rows_.end())) * F);
  comm.all_to_all_single(std::span<const float>(d_grouped_), std::span<const size_t>(send_counts_),
                         std::span<float>(d_out_), std::span<const size_t>(recv_counts_));
  for (int i = 0; i < n; ++i) {
    for (int e = 0; e < m; ++e) {
      const size_t begin = segment_begin(i, e), rows = size_t(segment_rows(i, e));
      model::expert_backward_input(
          expert(experts, e), std::span(expert_in_).subspan(begin * D, rows * D),
          acts_[size_t(i) * m + e], std::span(d_out_).subspan(begin * D, rows * D),
          segment_rows(i, e), c, d_hid_, std::span(d_pre_).subspan(begin * F, rows * F),
          std::span(d_in_).subspan(begin * D, rows * D));
    }
  }
  if (sharding_.size > 1) sharding_.reduce(d_in_);  // f's backward: the partial dx summed
  std::fill(d_grouped_.begin(), d_grouped_.end(), 0.0f);
  comm.all_to_all_single(std::span<const float>(d_in_), std::span<const size_t>(recv_counts_),
                         std::span<float>(d_grouped_), std::span<const size_t>(send_counts_));
  model::dispatch_backward(d_grouped_, r, D, dh);

  // The router's backward is local: gates, aux loss, softmax, router weights.
  d_probs_.assign(size_t(r.tokens) * r.num_experts, 0.0f);
  d_logits_.resize(d_probs_.size());
  model::gate_backward(r, d_gate_, d_probs_);
  model::aux_loss_backward(r, c.aux_alpha, aux_scale, d_probs_);
  model::router_backward_input(h_, router, r, d_probs_, d_logits_, dh, D);
  weight_pending_ = true;
}

void EpMoeLayer::backward_weight(std::span<float> d_router,
                                 std::span<const std::span<float>> d_experts) {
  const model::MoeConfig& c = config_;
  const int D = c.d_model, F = c.d_ff, n = ep_size_, m = local_experts_;
  const size_t es = model::moe_expert_size(c);
  DTSIM_CHECK(weight_pending_ && d_experts.size() == size_t(n));
  for (std::span<float> d : d_experts) DTSIM_CHECK(d.size() == local_expert_params());
  for (int i = 0; i < n; ++i) {
    for (int e = 0; e < m; ++e) {
      const size_t begin = segment_begin(i, e), rows = size_t(segment_rows(i, e));
      model::expert_backward_weight(
          std::span(expert_in_).subspan(begin * D, rows * D), acts_[size_t(i) * m + e],
          std::span(d_out_).subspan(begin * D, rows * D),
          std::span(d_pre_).subspan(begin * F, rows * F), segment_rows(i, e), c,
          model::expert_grads(d_experts[i].subspan(e * es, es), c));
    }
  }
  model::router_backward_weight(h_, routing_, d_logits_, d_router, D);
  weight_pending_ = false;
}

size_t EpMoeLayer::activation_bytes() const {
  size_t n = grouped_in_.size() + grouped_out_.size() + routing_.probs.size() + expert_in_.size() +
             expert_out_.size();
  for (const model::ExpertActivations& a : acts_) n += a.pre.size() + a.hid.size();
  if (weight_pending_) n += d_out_.size() + d_pre_.size() + d_logits_.size();
  return n * sizeof(float);
}

namespace {

// One micro-batch's EpMoeLayer and the activation bytes it has recorded.
struct EpMoeState : model::LayerState {
  EpMoeState(const model::MoeConfig& c, int rank, int size, const model::ExpertSharding& sharding,
             model::MemoryLedger* ledger)
      : layer(c, rank, size, sharding), ledger(ledger) {}
  ~EpMoeState() override {
    if (ledger != nullptr) ledger->add(model::MemoryCategory::kActivations, -recorded);
  }
  // Records the layer's activation bytes now in the ledger.
  void record() {
    const int64_t bytes = static_cast<int64_t>(layer.activation_bytes());
    if (ledger != nullptr) ledger->add(model::MemoryCategory::kActivations, bytes - recorded);
    recorded = bytes;
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
    model::add_expert_params(layout, name_ + ".expert" + std::to_string(e), m, full_d_ff_,
                             sharding_.rank);
  }
}

std::unique_ptr<model::LayerState> EpMoeBlock::make_state(model::MemoryLedger* ledger) const {
  return std::make_unique<EpMoeState>(config_, ep_rank_, ep_size_, sharding_, ledger);
}

void EpMoeBlock::forward(std::span<const float> p, std::span<const float> x, int batch,
                         std::span<float> y, model::LayerState& state, model::Workspace& /*ws*/) {
  auto& s = static_cast<EpMoeState&>(state);
  const size_t rs = model::moe_router_size(config_);
  s.layer.forward(p.first(rs), p.subspan(rs), x, batch, y, *ep_);
  s.record();
}

std::span<const std::span<float>> EpMoeBlock::expert_targets(std::span<float> g,
                                                             model::MemoryLedger* ledger) {
  const size_t local = g.size() - model::moe_router_size(config_);
  const bool mixed = accumulation_.precision == model::Precision::kMixedBf16;
  // fp32 with one micro-batch: the other sources' gradients are added right away.
  const bool at_once = !mixed && accumulation_.micro_batches == 1;
  // Whether sources 1..N-1 go to contributions_, scratch zeroed every backward, instead of
  // accumulating in the fp32 partials.
  const bool rest_is_scratch = mixed || at_once;
  if (targets_.empty()) {  // the first backward: the buffers, recorded in the stack's ledger
    const size_t n = size_t(ep_size_ - 1) * local;
    if (mixed) {
      partials_bf16_ = model::TrackedBuffer<BFloat16>(ledger, model::MemoryCategory::kGradients, n,
                                                      BFloat16(0.0f));
    } else if (!at_once) {
      partials_ = model::TrackedBuffer<float>(ledger, model::MemoryCategory::kGradients, n);
    }
    if (rest_is_scratch) {
      contributions_ = model::TrackedBuffer<float>(ledger, model::MemoryCategory::kActivations, n);
    }
    targets_.resize(ep_size_);
  }
  // Source 0 into the layer's gradients; sources 1..N-1 into the partials (fp32, several
  // micro-batches) or zeroed fp32 contributions, added to the gradients right away (fp32,
  // one micro-batch) or rounded into the bf16 partials (mixed): finish_targets().
  targets_[0] = g.subspan(model::moe_router_size(config_));
  std::span<float> rest = rest_is_scratch ? contributions_.span() : partials_.span();
  if (rest_is_scratch) std::fill(rest.begin(), rest.end(), 0.0f);
  for (int i = 1; i < ep_size_; ++i) targets_[i] = rest.subspan(size_t(i - 1) * local, local);
  return targets_;
}

void EpMoeBlock::finish_targets() {
  if (accumulation_.precision == model::Precision::kMixedBf16) {
    model::bf16_accumulate(partials_bf16_.span(), contributions_.span());
  } else if (accumulation_.micro_batches == 1) {
    for (int i = 1; i < ep_size_; ++i) add_into(targets_[0], std::span<const float>(targets_[i]));
  }
}

void EpMoeBlock::backward(std::span<const float> p, std::span<const float> x,
                          std::span<const float> dy, const model::BackwardScale& scale,
                          std::span<float> g, std::span<float> dx, model::LayerState& state,
                          model::Workspace& ws) {
  auto& s = static_cast<EpMoeState&>(state);
  const size_t rs = model::moe_router_size(config_);
  const std::span<const std::span<float>> targets = expert_targets(g, s.ledger);
  if (dx.empty()) dx = ws.take(0, x.size());  // the layer always computes it
  std::fill(dx.begin(), dx.end(), 0.0f);
  s.layer.backward(p.first(rs), p.subspan(rs), dy, scale.grad_scale * float(scale.batch),
                   g.first(rs), targets, dx, *ep_);
  finish_targets();
}

void EpMoeBlock::backward_input(std::span<const float> p, std::span<const float> x,
                                std::span<const float> dy, const model::BackwardScale& scale,
                                std::span<float> dx, model::LayerState& state,
                                model::Workspace& ws) {
  auto& s = static_cast<EpMoeState&>(state);
  const size_t rs = model::moe_router_size(config_);
  if (dx.empty()) dx = ws.take(0, x.size());  // the layer always computes it
  std::fill(dx.begin(), dx.end(), 0.0f);
  s.layer.backward_input(p.first(rs), p.subspan(rs), dy, scale.grad_scale * float(scale.batch), dx,
                         *ep_);
  s.record();  // with the gradients kept for backward_weight
}

void EpMoeBlock::backward_weight(std::span<const float> /*x*/,
                                 const model::BackwardScale& /*scale*/, std::span<float> g,
                                 model::LayerState& state, model::Workspace& /*ws*/) {
  auto& s = static_cast<EpMoeState&>(state);
  const size_t rs = model::moe_router_size(config_);
  s.layer.backward_weight(g.first(rs), expert_targets(g, s.ledger));
  finish_targets();
  s.record();
}

namespace {

// expert_grads += each of the N-1 partials in order, then the partials are zeroed.
template <class T>
void add_partials(std::span<T> expert_grads, std::span<T> partials) {
  if (partials.empty()) return;  // no backward yet (or a one-rank group)
  const size_t local = expert_grads.size();
  DTSIM_CHECK(partials.size() % local == 0);
  for (size_t at = 0; at < partials.size(); at += local) {
    add_into(expert_grads, std::span<const T>(partials.subspan(at, local)));
  }
  std::fill(partials.begin(), partials.end(), T(0.0f));
}

}  // namespace

void EpMoeBlock::finish_gradients(std::span<float> expert_grads) {
  DTSIM_CHECK(accumulation_.precision == model::Precision::kFp32);
  add_partials(expert_grads, partials_.span());
}

void EpMoeBlock::finish_gradients(std::span<BFloat16> expert_grads) {
  DTSIM_CHECK(accumulation_.precision == model::Precision::kMixedBf16);
  add_partials(expert_grads, partials_bf16_.span());
}

void finish_expert_gradients(model::LayerStack& stack) {
  for (int l = 0; l < stack.num_layers(); ++l) {
    auto* block = dynamic_cast<EpMoeBlock*>(&stack.layer(l));
    if (block == nullptr) continue;
    const model::ParamRange r = stack.layout().layer_range(l);
    with_buffers(stack.store(), [&](auto /*params*/, auto grads) {
      const size_t begin = r.begin + model::moe_router_size(block->config());
      block->finish_gradients(grads.subspan(begin, r.end - begin));
    });
  }
}

int64_t expert_partial_bytes(model::LayerStack& stack) {
  int64_t bytes = 0;
  for (int l = 0; l < stack.num_layers(); ++l) {
    if (const auto* block = dynamic_cast<const EpMoeBlock*>(&stack.layer(l))) {
      bytes += static_cast<int64_t>(block->partial_bytes());
    }
  }
  return bytes;
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
                                  TracedComm* ep, EpMoeBlock::Accumulation accumulation,
                                  const model::ExpertSharding& sharding) {
  model::Layers layers;
  layers.push_back(std::make_unique<model::Linear>("embed", c.input_dim, c.moe.d_model));
  for (int l = 0; l < c.num_blocks; ++l) {
    layers.push_back(std::make_unique<EpMoeBlock>(c.moe, ep_rank, ep_size, ep, accumulation,
                                                  model::moe_block_name(l, c.num_blocks),
                                                  sharding));
  }
  layers.push_back(std::make_unique<model::Linear>("head", c.moe.d_model, c.num_classes));
  return layers;
}

}  // namespace dtsim::train
