// A whole MoE layer built from the pieces in moe.h (the sparse path a single rank runs), and
// the dense all-expert reference that it must match: every expert computed on every token
// and combined with a (T, E) gate matrix that is zero where a slot was not chosen or dropped.
#pragma once

#include <span>
#include <string>
#include <utility>
#include <vector>

#include "model/layer.h"
#include "model/moe.h"

namespace dtsim::model {

// Thread safety: none; holds the activations of the last forward for backward.
class MoeLayer {
 public:
  // `config` with this rank's d_ff (the full F / sharding.size) under expert tensor
  // parallelism.
  explicit MoeLayer(const MoeConfig& config, ExpertSharding sharding = {})
      : config_(config), sharding_(std::move(sharding)), zero_b2_(config.d_model, 0.0f) {}

  // y (T, D) = MoE(h (T, D)) with the layer's params (moe_layer_size); returns the aux loss.
  float forward(std::span<const float> params, std::span<const float> h, int tokens,
                std::span<float> y);
  // Given dy (T, D) and aux_scale (the weight of the aux loss in the objective):
  // grads (moe_layer_size) += and dh (T, D) +=. Must follow forward with the same params.
  void backward(std::span<const float> params, std::span<const float> dy, float aux_scale,
                std::span<float> grads, std::span<float> dh);
  // backward split for ZB-H1: backward_input adds dh (T, D) += and keeps the gradients
  // backward_weight reads (the expert outputs', the pre-activations' and the router logits'),
  // so dy may change once it returns; backward_weight then adds grads (moe_layer_size) +=.
  // Input then weight is bitwise backward (which is just that).
  void backward_input(std::span<const float> params, std::span<const float> dy, float aux_scale,
                      std::span<float> dh);
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
  // Expert e's weights; b2 zero on every tensor-parallel rank but 0 (added once).
  ExpertWeights expert(std::span<const float> params, int e) const;

  MoeConfig config_;
  ExpertSharding sharding_;
  std::vector<float> zero_b2_;  // (D) zeros
  std::span<const float> h_;    // (T, D) the caller's input, kept until backward
  Routing routing_;
  std::vector<float> grouped_in_;        // (rows, D) dispatched tokens
  std::vector<float> grouped_out_;       // (rows, D) expert outputs
  std::vector<ExpertActivations> acts_;  // (E) per-expert activations
  // Backward workspaces, kept so a step does not allocate them anew; d_out_, d_pre_ and
  // d_logits_ are what backward_weight reads (in activation_bytes while weight_pending_).
  std::vector<float> d_out_;     // (rows, D) gradient w.r.t. the expert outputs
  std::vector<float> d_in_;      // (rows, D) gradient w.r.t. the dispatched tokens
  std::vector<float> d_gate_;    // (T, k) gradient w.r.t. the gates
  std::vector<float> d_probs_;   // (T, E) gradient w.r.t. the router probabilities
  std::vector<float> d_logits_;  // (T, E) gradient w.r.t. the router logits
  std::vector<float> d_hid_;     // (max_e n_e, F) scratch: one expert's GELU output gradient
  std::vector<float> d_pre_;     // (rows, F) gradient w.r.t. the expert pre-activations
  bool weight_pending_ = false;  // between backward_input and backward_weight
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
    State(const MoeConfig& c, const ExpertSharding& sharding, MemoryLedger* ledger)
        : layer(c, sharding), ledger(ledger) {}
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
