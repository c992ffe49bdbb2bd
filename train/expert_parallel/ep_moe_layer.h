// Expert parallelism for the MoE layer (GShard / Switch): model::MoeLayer given an
// AllToAllExchange, so that its dispatched rows travel to the ranks that hold their experts
// and back (model/moe_layer.h states the steps):
//
//   forward:  all_to_all(counts), all_to_all_single(tokens), all_to_all_single(outputs back)
//   backward: all_to_all_single(output gradients), all_to_all_single(input gradients back)
//
// Rank r of N owns experts [r E/N, (r+1) E/N). The dispatched buffer is grouped by expert, so
// the rows for rank j are one contiguous run and the split sizes come straight from the
// routing's offsets. Each local expert runs once per source rank on that source's rows, so
// outputs and input gradients are bitwise the single-rank layer's on the source's tokens, and
// each source's weight gradient can go to its own target (EpMoeBlock sums them in the order a
// single-rank reference sums its data-parallel groups).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/bf16.h"
#include "model/layer.h"
#include "model/layer_stack.h"
#include "model/memory.h"
#include "model/moe.h"
#include "model/moe_layer.h"
#include "model/moe_model.h"
#include "model/param_layout.h"
#include "train/traced_comm.h"

namespace dtsim::train {

// model::ExpertExchange as all_to_alls on an expert-parallel group.
// Thread safety: none; one rank thread.
class AllToAllExchange : public model::ExpertExchange {
 public:
  // Rank `rank` of `size`; `comm` (of that rank and size) may be set later (set_comm).
  AllToAllExchange(int rank, int size, TracedComm* comm = nullptr)
      : rank_(rank), size_(size), comm_(comm) {}
  void set_comm(TracedComm* comm) { comm_ = comm; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void exchange_counts(std::span<const int32_t> counts, std::span<int32_t> recv_rows) override;
  void exchange_rows(std::span<const float> send, std::span<const size_t> send_counts,
                     std::span<float> recv, std::span<const size_t> recv_counts) override;

 private:
  TracedComm& comm() const;
  int rank_, size_;
  TracedComm* comm_;
};

// One expert-parallel rank's part of an MoE layer: model::MoeLayer with an AllToAllExchange
// on the communicator given to each call (model::MoeLayer's contract otherwise).
// Thread safety: none; holds the activations of the last forward for backward.
class EpMoeLayer {
 public:
  // Rank `ep_rank` of `ep_size`; num_experts % ep_size == 0. `config`'s d_ff is this rank's
  // share under expert tensor parallelism (`sharding`, model/moe.h).
  EpMoeLayer(const model::MoeConfig& config, int ep_rank, int ep_size,
             model::ExpertSharding sharding = {})
      : exchange_(ep_rank, ep_size), layer_(config, std::move(sharding), &exchange_) {}

  int local_experts() const { return layer_.local_experts(); }
  int first_expert() const { return layer_.first_expert(); }
  size_t local_expert_params() const { return layer_.local_expert_params(); }

  // Three all_to_alls on `comm` (counts, tokens, outputs).
  float forward(std::span<const float> router, std::span<const float> experts,
                std::span<const float> h, int tokens, std::span<float> y, TracedComm& comm) {
    exchange_.set_comm(&comm);
    return layer_.forward(router, experts, h, tokens, y);
  }
  // Two all_to_alls; d_experts[i] gets the local experts' gradient from source i's tokens.
  void backward(std::span<const float> router, std::span<const float> experts,
                std::span<const float> dy, float aux_scale, std::span<float> d_router,
                std::span<const std::span<float>> d_experts, std::span<float> dh,
                TracedComm& comm) {
    backward_input(router, experts, dy, aux_scale, dh, comm);
    backward_weight(d_router, d_experts);
  }
  // The split: both all_to_alls in backward_input, none in backward_weight.
  void backward_input(std::span<const float> router, std::span<const float> experts,
                      std::span<const float> dy, float aux_scale, std::span<float> dh,
                      TracedComm& comm) {
    exchange_.set_comm(&comm);
    layer_.backward_input(router, experts, dy, aux_scale, dh);
  }
  void backward_weight(std::span<float> d_router, std::span<const std::span<float>> d_experts) {
    layer_.backward_weight(d_router, d_experts);
  }
  size_t activation_bytes() const { return layer_.activation_bytes(); }

 private:
  AllToAllExchange exchange_;
  model::MoeLayer layer_;
};

// The expert-parallel MoE layer "<name>" (a drop-in for model::MoeBlock): "<name>.router"
// (E, D), replicated, then this rank's experts "<name>.expert<e>.*" for its e. Each
// micro-batch's state holds its own model::MoeLayer, all on the block's AllToAllExchange.
//
// Gradients in a single-rank reference's order: the reference (train/reference.cc's
// accumulation) accumulates each data-parallel group's micro-batches into zeroed gradients
// and then sums the groups in order. So the block keeps the experts' gradient apart per
// source rank of its expert group: source 0's accumulates in the store's gradients as a
// layer's always does; with one micro-batch per step (fp32) each other source's is computed
// into zeroed scratch and added right away, in source order; with several (or under mixed
// precision) sources 1..N-1 accumulate in the block's partial buffers (N-1 x the local
// experts, recorded as gradients; bf16 under mixed precision, each micro-batch rounded in as
// the store rounds its own), which finish_gradients() adds into the store's gradients in
// source order and zeroes: the caller must call it once per step, after the last backward
// and before the gradients are read (finish_expert_gradients does it for a whole stack).
class EpMoeBlock : public model::Layer {
 public:
  // How the step accumulates gradients: the store's type and the micro-batches per step.
  struct Accumulation {
    model::Precision precision = model::Precision::kFp32;
    int micro_batches = 1;
  };
  // Rank `ep_rank` of `ep_size` on the expert-parallel group `ep` (null: for the layout
  // only); `ep` must outlive the layer. `config` is the whole layer's; under expert tensor
  // parallelism (`sharding`) each local expert's hidden width is this rank's share, each
  // tensor a TensorShard of the whole one.
  EpMoeBlock(const model::MoeConfig& config, int ep_rank, int ep_size, TracedComm* ep,
             Accumulation accumulation, std::string name = "moe",
             model::ExpertSharding sharding = {})
      : config_(config),
        full_d_ff_(config.d_ff),
        ep_rank_(ep_rank),
        ep_size_(ep_size),
        accumulation_(accumulation),
        name_(std::move(name)),
        sharding_(std::move(sharding)),
        exchange_(std::make_unique<AllToAllExchange>(ep_rank, ep_size, ep)) {
    config_.d_ff /= sharding_.size;
  }
  void add_params(model::ParamLayout& layout) const override;
  int in_dim() const override { return config_.d_model; }
  int out_dim() const override { return config_.d_model; }
  std::unique_ptr<model::LayerState> make_state(model::MemoryLedger* ledger) const override;
  // Three all_to_alls (counts, tokens, outputs).
  void forward(std::span<const float> params, std::span<const float> x, int batch,
               std::span<float> y, model::LayerState& state, model::Workspace& ws) override;
  // Two all_to_alls (output gradients, input gradients); the aux loss weighs grad_scale * B.
  // The router's gradient and source 0's expert gradient go to grads, the other sources' to
  // scratch or the partials (see above).
  void backward(std::span<const float> params, std::span<const float> x, std::span<const float> dy,
                const model::BackwardScale& scale, std::span<float> grads, std::span<float> dx,
                model::LayerState& state, model::Workspace& ws) override;
  // The split (ZB-H1): both all_to_alls in backward_input, which keeps the gradients the
  // weight half reads in the state (recorded as activations until backward_weight).
  bool splits_backward() const override { return true; }
  void backward_input(std::span<const float> params, std::span<const float> x,
                      std::span<const float> dy, const model::BackwardScale& scale,
                      std::span<float> dx, model::LayerState& state, model::Workspace& ws) override;
  void backward_weight(std::span<const float> x, const model::BackwardScale& scale,
                       std::span<float> grads, model::LayerState& state,
                       model::Workspace& ws) override;

  // expert_grads (the local experts' gradients in the store, fp32 or bf16 as the precision)
  // += the partials of sources 1..N-1 in that order (fp32 sums, rounded to the store's type
  // after each add), then the partials are zeroed for the next step.
  void finish_gradients(std::span<float> expert_grads);
  void finish_gradients(std::span<BFloat16> expert_grads);
  const model::MoeConfig& config() const { return config_; }
  // Bytes of the partials (recorded as gradients once the first backward allocates them).
  size_t partial_bytes() const {
    return partials_.size() * sizeof(float) + partials_bf16_.size() * sizeof(BFloat16);
  }

 private:
  model::MoeConfig config_;  // d_ff: this rank's share
  int full_d_ff_;
  int ep_rank_, ep_size_;
  Accumulation accumulation_;
  std::string name_;
  // grads' expert part as per-source targets (see above): source 0 the store's, the others
  // scratch or the partials; then the sources 1..N-1 scratch added or rounded in.
  std::span<const std::span<float>> expert_targets(std::span<float> grads,
                                                   model::MemoryLedger* ledger);
  void finish_targets();

  model::ExpertSharding sharding_;
  std::unique_ptr<AllToAllExchange> exchange_;    // lent to each state's layer
  std::vector<std::span<float>> targets_;         // (N) backward's per-source targets
  model::TrackedBuffer<float> partials_;          // (N-1, local) fp32 partials
  model::TrackedBuffer<BFloat16> partials_bf16_;  // (N-1, local) mixed: bf16 partials
  model::TrackedBuffer<float> contributions_;     // (N-1, local) one micro-batch's, scratch
};

// After a step's last backward: finish_gradients() of every EpMoeBlock of `stack`, on the
// store's gradients.
void finish_expert_gradients(model::LayerStack& stack);
// Bytes of the partials of every EpMoeBlock of `stack` (ZeRO-2 counts only its shard's
// gradient, not the buffers the micro-batches accumulate into: these among them).
int64_t expert_partial_bytes(model::LayerStack& stack);

// Where a layout of the MoE classifier's layers on one expert-parallel rank (the whole model
// or a pipeline chunk of it) keeps its parameters: `replicated` the embedding, the head and
// each MoE layer's router, in that order (the same on every rank of a data-parallel group),
// `experts` each MoE layer's local experts (the same on the ranks of an expert_dp group).
struct EpParamSplit {
  std::vector<model::ParamRange> replicated, experts;
};
EpParamSplit ep_param_split(const model::ParamLayout& layout, const model::MoeConfig& config);

// The MoE classifier's layers on expert-parallel rank `ep_rank` of `ep_size`: the replicated
// embedding, an EpMoeBlock per MoE layer, the replicated head (ep null: for their layout only).
// `accumulation`: as the run's (TrainConfig's precision and micro_batches).
// `sharding`: expert tensor parallelism inside each expert (model::ExpertSharding).
model::Layers ep_moe_model_layers(const model::MoeModelConfig& config, int ep_rank, int ep_size,
                                  TracedComm* ep, EpMoeBlock::Accumulation accumulation,
                                  const model::ExpertSharding& sharding = {});

}  // namespace dtsim::train
