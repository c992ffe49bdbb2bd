// MoeModel: a classifier with L top-k MoE layers (L = 1 by default), trained with softmax
// cross-entropy plus the Switch load-balancing loss of every MoE layer.
//
//   z = We x + be (B, D);   h_l = MoE_l(h_{l-1}) = h_{l-1} + sum_j gate_j expert_j(h_{l-1})
//   (h_0 = z, B x D);   logits = Wh h_L + bh (B, C);   loss = mean of -log softmax[label]
//
// Layers for hooks and layer_range(): 0 embed, 1..L MoE (router then experts), L + 1 head.
#pragma once

#include <cstdint>
#include <span>
#include <string>

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
  int num_blocks = 1;   // L: MoE layers, one after the other (pipeline stages cut them)
};

// The name of MoE layer l (0..L-1) of L: "moe" when L = 1, else "moe<l>".
std::string moe_block_name(int l, int num_blocks);

// Layout: layer 0 "embed.w" (D, D_in), "embed.b" (D); layers 1..L "<moe>.router" (E, D)
// then "<moe>.expert<e>.w1" (F, D), ".b1" (F), ".w2" (D, F), ".b2" (D) for each e, <moe>
// their moe_block_name; layer L + 1 "head.w" (C, D), "head.b" (C).
ParamLayout moe_model_layout(const MoeModelConfig& config);

// The classifier's L + 2 layers: Linear embed, L MoeBlocks, Linear head.
// `sharding`: expert tensor parallelism (ExpertSharding), the experts' hidden width split.
Layers moe_model_layers(const MoeModelConfig& config, const ExpertSharding& sharding = {});

// Thread safety: none; a model is used by one thread at a time (each rank owns its own).
class MoeModel {
 public:
  // With one MoE layer (num_blocks 1); kMoeLayer is the first MoE layer in any case.
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
  // The aux (load-balancing) loss of the last forward, summed over the MoE layers.
  float last_aux_loss() {
    float sum = 0;
    for (int l = 0; l < config_.num_blocks; ++l) sum += moe_state(l).aux_loss;
    return sum;
  }
  // The routing decisions of MoE layer `block`'s last forward.
  const Routing& last_routing(int block = 0) { return moe_state(block).layer.routing(); }

 private:
  MoeBlock::State& moe_state(int block) {
    return static_cast<MoeBlock::State&>(stack_.state(0, kMoeLayer + block));
  }

  MoeModelConfig config_;
  LayerStack stack_;
  CrossEntropyLoss loss_;
};

}  // namespace dtsim::model
