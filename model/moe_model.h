// MoeModel: a classifier with one top-k MoE layer, trained with softmax cross-entropy plus
// the Switch load-balancing loss.
//
//   z = We x + be (B, D);   h = MoE(z) = z + sum_j gate_j expert_j(z) (B, D)
//   logits = Wh h + bh (B, C);   loss = mean over samples of -log softmax(logits)[label]
//
// Layers for hooks and layer_range(): 0 embed, 1 MoE (router then experts), 2 head.
#pragma once

#include <cstdint>
#include <span>

#include "model/hooks.h"
#include "model/layer_stack.h"
#include "model/memory.h"
#include "model/moe.h"
#include "model/moe_layer.h"
#include "model/param_store.h"

namespace dtsim::model {

struct MoeModelConfig {
  int input_dim = 16;   // D_in
  int num_classes = 8;  // C
  MoeConfig moe;        // d_model (D), d_ff, experts, top_k, capacity, aux_alpha
};

// Layout: layer 0 "embed.w" (D, D_in), "embed.b" (D); layer 1 "moe.router" (E, D) then
// "moe.expert<e>.w1" (F, D), ".b1" (F), ".w2" (D, F), ".b2" (D) for each e; layer 2
// "head.w" (C, D), "head.b" (C).
ParamLayout moe_model_layout(const MoeModelConfig& config);

// The classifier's three layers: Linear embed, MoeBlock, Linear head.
Layers moe_model_layers(const MoeModelConfig& config);

// Thread safety: none; a model is used by one thread at a time (each rank owns its own).
class MoeModel {
 public:
  static constexpr int kEmbedLayer = 0, kMoeLayer = 1, kHeadLayer = 2;

  // Builds the model with seeded uniform(+-1/sqrt(fan_in)) init (same seed, same bits).
  MoeModel(const MoeModelConfig& config, uint64_t seed, Precision precision = Precision::kFp32);
  MoeModel(const MoeModel&) = delete;
  MoeModel& operator=(const MoeModel&) = delete;

  const MoeModelConfig& config() const { return config_; }
  size_t num_params() const { return layout().size(); }
  int num_layers() const { return layout().num_layers(); }
  ParamRange layer_range(int layer) const { return layout().layer_range(layer); }
  const ParamLayout& layout() const { return stack_.layout(); }
  ParamStore& store() { return stack_.store(); }
  LayerStack& stack() { return stack_; }
  std::span<float> params() { return store().params(); }
  std::span<float> grads() { return store().grads(); }
  void zero_grad() { store().zero_grad(); }
  MemoryLedger& memory() { return stack_.memory(); }

  // logits (B, C) = model(x (B, D_in)).
  void forward(std::span<const float> x, int batch, std::span<float> logits);

  // Runs forward and backward on x (B, D_in) with labels (B) and returns the mean
  // cross-entropy. Gradients ACCUMULATE: grads += grad_scale * d(sum_i CE_i + B * aux), i.e.
  // grad_scale = 1/B gives the gradient of mean CE + aux. The aux loss is computed over the
  // B tokens passed in (as each rank would on its own micro-batch); see last_aux_loss().
  float forward_backward(std::span<const float> x, std::span<const int32_t> labels, int batch,
                         float grad_scale, LayerHooks* hooks = nullptr);
  float forward_backward(std::span<const float> x, std::span<const int32_t> labels, int batch,
                         LayerHooks* hooks = nullptr) {
    return forward_backward(x, labels, batch, 1.0f / static_cast<float>(batch), hooks);
  }
  // The aux (load-balancing) loss of the last forward.
  float last_aux_loss() { return moe_state().aux_loss; }
  // The routing decisions of the last forward.
  const Routing& last_routing() { return moe_state().layer.routing(); }

 private:
  MoeBlock::State& moe_state() { return static_cast<MoeBlock::State&>(stack_.state(0, kMoeLayer)); }

  MoeModelConfig config_;
  LayerStack stack_;
  CrossEntropyLoss loss_;
};

}  // namespace dtsim::model
