// EpMoeLayer: one expert-parallel rank's part of a top-k MoE layer (GShard / Switch), built
// from the pieces in model/moe.h with all_to_all between them:
//
//   router_forward (local tokens) -> dispatch_forward -> all_to_all(counts)
//     -> all_to_all_single(tokens) -> expert_forward (local experts)
//     -> all_to_all_single(outputs back) -> combine_forward
//
// Rank r of N owns experts [r E/N, (r+1) E/N). The dispatched buffer is grouped by expert, so
// the rows for rank j are one contiguous run and the split sizes come straight from the
// routing's offsets. Rows arrive grouped by source rank, then expert; they are regrouped by
// expert so each expert runs once on all of its tokens, and put back before the return trip.
// Backward mirrors it: all_to_all_single(d outputs) -> expert_backward ->
// all_to_all_single(d inputs back) -> dispatch_backward; the router's backward stays local.
// Capacity is per rank: ceil(factor * T_local * k / E) over the tokens routed together.
#pragma once

#include <span>
#include <string>
#include <utility>
#include <vector>

#include "model/layer.h"
#include "model/moe.h"
#include "model/moe_model.h"
#include "model/param_layout.h"
#include "train/traced_comm.h"

namespace dtsim::train {

// Thread safety: none; holds the activations of the last forward for backward.
class EpMoeLayer {
 public:
  // Rank `ep_rank` of `ep_size`; num_experts % ep_size == 0.
  EpMoeLayer(const model::MoeConfig& config, int ep_rank, int ep_size);

  int local_experts() const { return local_experts_; }
  int first_expert() const { return ep_rank_ * local_experts_; }
  // Elements of this rank's expert parameters: local_experts() * moe_expert_size().
  size_t local_expert_params() const;

  // y (T, D) = MoE(h (T, D)) with the replicated router (E, D) and this rank's experts;
  // returns this rank's aux loss. Three all_to_alls on `comm` (counts, tokens, outputs).
  float forward(std::span<const float> router, std::span<const float> experts,
                std::span<const float> h, int tokens, std::span<float> y, TracedComm& comm);
  // Given dy (T, D): d_router (E, D) +=, d_experts (local) +=, dh (T, D) +=; aux_scale is the
  // weight of this rank's aux loss in the objective. Two all_to_alls on `comm`.
  void backward(std::span<const float> router, std::span<const float> experts,
                std::span<const float> dy, float aux_scale, std::span<float> d_router,
                std::span<float> d_experts, std::span<float> dh, TracedComm& comm);

  // Bytes of activations held for backward.
  size_t activation_bytes() const;

 private:
  // Copies rows between the received layout (source-major) and the expert-major layout.
  void to_expert_major(std::span<const float> received, std::span<float> grouped) const;
  void from_expert_major(std::span<const float> grouped, std::span<float> received) const;

  model::MoeConfig config_;
  int ep_rank_, ep_size_, local_experts_;
  std::span<const float> h_;  // (T, D) the caller's input, kept until backward
  model::Routing routing_;
  std::vector<size_t> send_counts_;             // (N) elements to each rank
  std::vector<size_t> recv_counts_;             // (N) elements from each rank
  std::vector<int32_t> recv_rows_;              // (N, E/N) rows from source i for local expert e
  std::vector<int> expert_offsets_;             // (E/N + 1) expert-major row offsets
  std::vector<float> grouped_in_;               // (rows, D) this rank's tokens, grouped by expert
  std::vector<float> grouped_out_;              // (rows, D) their expert outputs, returned
  std::vector<float> recv_buf_;                 // (R, D) rows received, source-major
  std::vector<float> expert_in_;                // (R, D) received rows, expert-major
  std::vector<float> expert_out_;               // (R, D) local experts' outputs, expert-major
  std::vector<model::ExpertActivations> acts_;  // (E/N)
  // Backward's scratch, kept so that a micro-batch allocates nothing once sizes settle.
  std::vector<float> d_grouped_;  // (rows, D) gradients of grouped_out_, then of grouped_in_
  std::vector<float> d_gate_;     // (T, k)
  std::vector<float> d_out_;      // (R, D) expert-major output gradients
  std::vector<float> d_in_;       // (R, D) expert-major input gradients
  std::vector<float> d_probs_;    // (T, E)
};

// EpMoeLayer as the model's MoE layer "<name>" (a drop-in for model::MoeBlock):
// "<name>.router" (E, D), replicated, then this rank's experts "<name>.expert<e>.*" for its
// e. Each micro-batch's state holds its own EpMoeLayer.
class EpMoeBlock : public model::Layer {
 public:
  // Rank `ep_rank` of `ep_size` on the expert-parallel group `ep` (null: for the layout
  // only); `ep` must outlive the layer.
  EpMoeBlock(const model::MoeConfig& config, int ep_rank, int ep_size, TracedComm* ep,
             std::string name = "moe")
      : config_(config), ep_rank_(ep_rank), ep_size_(ep_size), ep_(ep), name_(std::move(name)) {}
  void add_params(model::ParamLayout& layout) const override;
  int in_dim() const override { return config_.d_model; }
  int out_dim() const override { return config_.d_model; }
  std::unique_ptr<model::LayerState> make_state(model::MemoryLedger* ledger) const override;
  // Three all_to_alls (counts, tokens, outputs).
  void forward(std::span<const float> params, std::span<const float> x, int batch,
               std::span<float> y, model::LayerState& state, model::Workspace& ws) override;
  // Two all_to_alls (output gradients, input gradients); the aux loss weighs grad_scale * B.
  void backward(std::span<const float> params, std::span<const float> x, std::span<const float> dy,
                const model::BackwardScale& scale, std::span<float> grads, std::span<float> dx,
                model::LayerState& state, model::Workspace& ws) override;

 private:
  model::MoeConfig config_;
  int ep_rank_, ep_size_;
  TracedComm* ep_;
  std::string name_;
};

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
model::Layers ep_moe_model_layers(const model::MoeModelConfig& config, int ep_rank, int ep_size,
                                  TracedComm* ep);

}  // namespace dtsim::train
