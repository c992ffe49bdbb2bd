// A whole MoE layer built from the pieces in moe.h (the sparse path, on one rank or across an
// expert-parallel group through an ExpertExchange), and the dense all-expert reference that
// it must match: every expert computed on every token and combined with a (T, E) gate matrix
// that is zero where a slot was not chosen or dropped.
#pragma once

#include <span>
#include <string>
#include <utility>
#include <vector>

#include "model/layer.h"
#include "model/moe.h"

namespace dtsim::model {

// The layer's steps, with an ExpertExchange (expert parallelism) between them:
//
//   router_forward (local tokens) -> dispatch_forward -> [exchange counts, rows]
//     -> expert_forward (this rank's experts, per source rank) -> [rows back]
//     -> combine_forward
//
// and backward in reverse (combine, [rows], experts, [rows back], dispatch; the router is
// local). Rows arrive grouped by source rank, then expert, and each local expert runs once
// per source on that source's rows: the very calls (same rows, same shapes) a layer without
// an exchange makes on the source's tokens alone, so outputs and input gradients are bitwise
// those, and each source's expert gradient can go to its own target. Without an exchange
// (one source, every expert) the dispatched buffer is the experts' input: no row is copied.
// Capacity is per rank: ceil(factor * T * k / E) over the tokens routed together.
//
// Thread safety: none; holds the activations of the last forward for backward.
class MoeLayer {
 public:
  // `config` with this rank's d_ff (the full F / sharding.size) under expert tensor
  // parallelism; `exchange` (null: none) must outlive the layer, and E % its size() == 0.
  explicit MoeLayer(const MoeConfig& config, ExpertSharding sharding = {},
                    ExpertExchange* exchange = nullptr);
  MoeLayer(const MoeLayer&) = delete;
  MoeLayer& operator=(const MoeLayer&) = delete;

  int local_experts() const { return local_experts_; }
  int first_expert() const { return rank_ * local_experts_; }
  // Elements of this rank's expert parameters: local_experts() * moe_expert_size().
  size_t local_expert_params() const;

  // y (T, D) = MoE(h (T, D)) with the router (E, D) and this rank's experts (contiguous, as
  // the layout holds them); returns this rank's aux loss.
  float forward(std::span<const float> router, std::span<const float> experts,
                std::span<const float> h, int tokens, std::span<float> y);
  // The same with params = router then experts (moe_layer_size without an exchange).
  float forward(std::span<const float> params, std::span<const float> h, int tokens,
                std::span<float> y);
  // Given dy (T, D) and aux_scale (the weight of the aux loss in the objective):
  // grads (router then this rank's experts) += and dh (T, D) +=, each source's expert
  // gradient chained in source order. Must follow forward with the same params.
  void backward(std::span<const float> params, std::span<const float> dy, float aux_scale,
                std::span<float> grads, std::span<float> dh);
  // backward split for ZB-H1: backward_input adds dh (T, D) += (the exchange's rows both
  // ways) and keeps the gradients backward_weight reads (the expert outputs', the
  // pre-activations' and the router logits'), so dy may change once it returns;
  // backward_weight then adds d_router (E, D) += and, for each source rank i, d_experts[i]
  // (local_expert_params()) += this rank's experts' gradient from i's tokens, in source order
  // (targets may alias: they chain), with no communication. Input then weight is backward.
  void backward_input(std::span<const float> router, std::span<const float> experts,
                      std::span<const float> dy, float aux_scale, std::span<float> dh);
  void backward_input(std::span<const float> params, std::span<const float> dy, float aux_scale,
                      std::span<float> dh);
  void backward_weight(std::span<float> d_router, std::span<const std::span<float>> d_experts);
  // The same into grads = router then experts, every source's into the one target.
  void backward_weight(std::span<float> grads);

  // Selective recomputation: frees every expert's GELU output (n_e, F); rebuild_hidden()
  // recomputes it from the kept pre-activations, bitwise forward's, before backward.
  void drop_hidden();
  void rebuild_hidden();

  const MoeConfig& config() const { return config_; }
  const Routing& routing() const { return routing_; }
  // Bytes of activations held for backward, and between backward_input and backward_weight
  // the gradients kept for the latter.
  size_t activation_bytes() const;

 private:
  bool exchanges() const { return exchange_ != nullptr; }
  // Rows of segment (source i, local expert e) of the experts' input, and where it starts.
  int segment_rows(int i, int e) const { return recv_rows_[size_t(i) * local_experts_ + e]; }
  size_t segment_begin(int i, int e) const {
    return segment_begin_[size_t(i) * local_experts_ + e];
  }
  // The experts' side of the rows: the received ones, or without an exchange the dispatched.
  std::span<float> expert_in() { return exchanges() ? expert_in_ : grouped_in_; }
  std::span<float> expert_out() { return exchanges() ? expert_out_ : grouped_out_; }
  std::span<float> d_expert_out() { return exchanges() ? d_out_ : d_grouped_out_; }
  std::span<float> d_expert_in() { return exchanges() ? d_in_ : d_grouped_in_; }
  // Local expert e's weights; b2 zero on every tensor-parallel rank but 0 (added once).
  ExpertWeights expert(std::span<const float> experts, int e) const;

  MoeConfig config_;
  ExpertSharding sharding_;
  ExpertExchange* exchange_;
  int rank_ = 0, size_ = 1, local_experts_;
  std::vector<float> zero_b2_;  // (D) zeros
  std::span<const float> h_;    // (T, D) the caller's input, kept until backward
  Routing routing_;
  std::vector<size_t> send_counts_;      // (N) floats to each rank
  std::vector<size_t> recv_counts_;      // (N) floats from each rank
  std::vector<int32_t> recv_rows_;       // (N, E/N) rows from source i for local expert e
  std::vector<size_t> segment_begin_;    // (N, E/N) first row of each segment
  std::vector<float> grouped_in_;        // (rows, D) this rank's tokens, grouped by expert
  std::vector<float> grouped_out_;       // (rows, D) their expert outputs
  std::vector<float> expert_in_;         // (R, D) with an exchange: rows received
  std::vector<float> expert_out_;        // (R, D) with an exchange: their outputs
  std::vector<ExpertActivations> acts_;  // (N, E/N) per segment
  // Backward workspaces, kept so a step does not allocate them anew; the experts' side of
  // the output gradient, d_pre_ and d_logits_ are what backward_weight reads (in
  // activation_bytes while weight_pending_).
  std::vector<float> d_grouped_out_;       // (rows, D) gradient w.r.t. grouped_out_
  std::vector<float> d_grouped_in_;        // (rows, D) gradient w.r.t. grouped_in_
  std::vector<float> d_out_;               // (R, D) with an exchange: output gradients received
  std::vector<float> d_in_;                // (R, D) with an exchange: input gradients to return
  std::vector<float> d_gate_;              // (T, k) gradient w.r.t. the gates
  std::vector<float> d_probs_;             // (T, E) gradient w.r.t. the router probabilities
  std::vector<float> d_logits_;            // (T, E) gradient w.r.t. the router logits
  std::vector<float> d_hid_;               // (max segment rows, F) scratch: one segment's
  std::vector<float> d_pre_;               // (R, F) gradient w.r.t. the expert pre-activations
  std::vector<std::span<float>> targets_;  // (N) backward_weight(grads)'s per-source targets
  bool weight_pending_ = false;            // between backward_input and backward_weight
};

// MoeLayer as a model Layer "<name>" (default "moe"): "<name>.router" (E, D), then
// "<name>.expert<e>.w1" (F, D), ".b1" (F), ".w2" (D, F), ".b2" (D) for each e. Each micro-batch's
// state holds its own MoeLayer (routing and expert activations), whose bytes it records as
// activations. The aux loss's weight in the objective is grad_scale * B (the objective is sum CE +
// B aux). Selective recomputation drops the experts' GELU outputs (MoeLayer::drop_hidden);
// the router's probabilities, the dispatched tokens, the expert pre-activations and outputs
// stay.
class MoeBlock : public Layer {
 public:
  // `config` is the whole layer's; under expert tensor parallelism (sharding.size > 1) this
  // rank holds its shard of every expert (ExpertSharding), each tensor a TensorShard of the
  // whole layer's tensor of the same name.
  explicit MoeBlock(const MoeConfig& config, std::string name = "moe",
                    ExpertSharding sharding = {});
  void add_params(ParamLayout& layout) const override;
  int in_dim() const override { return config_.d_model; }
  int out_dim() const override { return config_.d_model; }
  std::unique_ptr<LayerState> make_state(MemoryLedger* ledger) const override;
  void forward(std::span<const float> params, std::span<const float> x, int batch,
               std::span<float> y, LayerState& state, Workspace& ws) override;
  void backward(std::span<const float> params, std::span<const float> x, std::span<const float> dy,
                const BackwardScale& scale, std::span<float> grads, std::span<float> dx,
                LayerState& state, Workspace& ws) override;
  // The split keeps the expert outputs', pre-activations' and router logits' gradients in
  // the state (recorded as activations until backward_weight).
  bool splits_backward() const override { return true; }
  void backward_input(std::span<const float> params, std::span<const float> x,
                      std::span<const float> dy, const BackwardScale& scale, std::span<float> dx,
                      LayerState& state, Workspace& ws) override;
  void backward_weight(std::span<const float> x, const BackwardScale& scale, std::span<float> grads,
                       LayerState& state, Workspace& ws) override;
  bool recomputes_selectively() const override { return true; }
  void rebuild_state(std::span<const float> params, std::span<const float> x, int batch,
                     LayerState& state) override;
  void release_rebuilt(LayerState& state) override;

  struct State : LayerState {
    State(const MoeConfig& c, const ExpertSharding& sharding, ExpertExchange* exchange,
          MemoryLedger* ledger)
        : layer(c, sharding, exchange), ledger(ledger) {}
    ~State() override;
    MoeLayer layer;
    MemoryLedger* ledger;
    int64_t recorded = 0;  // activation bytes recorded in the ledger
    float aux_loss = 0;    // of the last forward
    // Records the layer's activation bytes now in the ledger.
    void record();
  };

 private:
  MoeConfig config_;  // d_ff: this rank's share
  int full_d_ff_;
  std::string name_;
  ExpertSharding sharding_;
};

// The dense all-expert reference with the same contract as MoeLayer.
class DenseMoeReference {
 public:
  explicit DenseMoeReference(const MoeConfig& config) : config_(config) {}

  float forward(std::span<const float> params, std::span<const float> h, int tokens,
                std::span<float> y);
  void backward(std::span<const float> params, std::span<const float> dy, float aux_scale,
                std::span<float> grads, std::span<float> dh);
  // backward split for ZB-H1: backward_input adds dh (T, D) += and keeps the gradients
  // backward_weight reads (the expert outputs', the pre-activations' and the router logits'),
  // so dy may change once it returns; backward_weight then adds grads (moe_layer_size) +=.
  // Input then weight is bitwise backward (which is just that).
  void backward_input(std::span<const float> params, std::span<const float> dy, float aux_scale,
                      std::span<float> dh);
  void backward_weight(std::span<float> grads);
  const Routing& routing() const { return routing_; }

 private:
  MoeConfig config_;
  std::span<const float> h_;  // (T, D)
  Routing routing_;
  std::vector<float> gates_;             // (T, E) gate of (t, e) if kept, else 0
  std::vector<float> outs_;              // (E, T, D) every expert on every token
  std::vector<ExpertActivations> acts_;  // (E)
};

}  // namespace dtsim::model
