#include "train/expert_parallel/ep_moe_layer.h"

#include <algorithm>

#include <string>

#include "model/check.h"
#include "model/kernels.h"
#include "model/mlp_layers.h"
#include "train/grad_ops.h"

namespace dtsim::train {

TracedComm& AllToAllExchange::comm() const {
  DTSIM_CHECK(comm_ != nullptr && comm_->size() == size_ && comm_->rank() == rank_);
  return *comm_;
}

void AllToAllExchange::exchange_counts(std::span<const int32_t> counts,
                                       std::span<int32_t> recv_rows) {
  comm().all_to_all(counts, recv_rows);
}

void AllToAllExchange::exchange_rows(std::span<const float> send,
                                     std::span<const size_t> send_counts, std::span<float> recv,
                                     std::span<const size_t> recv_counts) {
  comm().all_to_all_single(send, send_counts, recv, recv_counts);
}

namespace {

// One micro-batch's MoE layer and the activation bytes it has recorded.
struct EpMoeState : model::LayerState {
  EpMoeState(const model::MoeConfig& c, const model::ExpertSharding& sharding,
             model::ExpertExchange* exchange, model::MemoryLedger* ledger)
      : layer(c, sharding, exchange), ledger(ledger) {}
  ~EpMoeState() override {
    if (ledger != nullptr) ledger->add(model::MemoryCategory::kActivations, -recorded);
  }
  // Records the layer's activation bytes now in the ledger.
  void record() {
    const int64_t bytes = static_cast<int64_t>(layer.activation_bytes());
    if (ledger != nullptr) ledger->add(model::MemoryCategory::kActivations, bytes - recorded);
    recorded = bytes;
  }
  model::MoeLayer layer;
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
    model::add_sharded_ffn_params(layout, name_ + ".expert" + std::to_string(e), m.d_model, m.d_ff,
                                  full_d_ff_, sharding_.rank);
  }
}

std::unique_ptr<model::LayerState> EpMoeBlock::make_state(model::MemoryLedger* ledger) const {
  return std::make_unique<EpMoeState>(config_, sharding_, exchange_.get(), ledger);
}

void EpMoeBlock::forward(std::span<const float> p, std::span<const float> x, int batch,
                         std::span<float> y, model::LayerState& state, model::Workspace& /*ws*/) {
  auto& s = static_cast<EpMoeState&>(state);
  const size_t rs = model::moe_router_size(config_);
  s.layer.forward(p.first(rs), p.subspan(rs), x, batch, y);
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
  s.layer.backward_input(p.first(rs), p.subspan(rs), dy, scale.grad_scale * float(scale.batch), dx);
  s.layer.backward_weight(g.first(rs), targets);
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
  s.layer.backward_input(p.first(rs), p.subspan(rs), dy, scale.grad_scale * float(scale.batch), dx);
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
