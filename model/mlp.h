// MlpModel: a residual MLP for regression, trained with mean-squared error.
//
//   x_0 = input (B, D)
//   x_{l+1} = x_l + W2_l gelu(W1_l x_l + b1_l) + b2_l     for l = 0..L-1 (Linear-GELU-Linear)
//   y = Wo x_L + bo (B, O);   loss = mean over samples of mean_j (y_j - target_j)^2
//
// The blocks are residual so that depth does not stall training. Layers for hooks and
// layer_range(): 0..L-1 are the blocks, L is the output head.
#pragma once

#include <cstdint>
#include <span>

#include "model/hooks.h"
#include "model/layer_stack.h"
#include "model/memory.h"
#include "model/param_store.h"

namespace dtsim::model {

struct MlpConfig {
  int input_dim = 16;   // D: input and residual width
  int hidden_dim = 64;  // H: width inside each block
  int num_blocks = 2;   // L
  int output_dim = 4;   // O
};

// Layout of an MLP: layer l < L holds "block<l>.w1" (H, D), ".b1" (H), ".w2" (D, H),
// ".b2" (D); layer L holds "head.w" (O, D), "head.b" (O).
ParamLayout mlp_layout(const MlpConfig& config);

// Layers [first, last) of the MLP's L + 1 (blocks 0..L-1, then the head): a pipeline stage's
// slice, or the whole model for [0, L + 1).
Layers mlp_layers(const MlpConfig& config, int first, int last);

// Thread safety: none; a model is used by one thread at a time (each rank owns its own).
class MlpModel {
 public:
  // Builds the model with seeded uniform(+-1/sqrt(fan_in)) init (same seed, same bits).
  MlpModel(const MlpConfig& config, uint64_t seed, Precision precision = Precision::kFp32);
  MlpModel(const MlpModel&) = delete;
  MlpModel& operator=(const MlpModel&) = delete;

  const MlpConfig& config() const { return config_; }
  size_t num_params() const { return layout().size(); }
  int num_layers() const { return layout().num_layers(); }
  ParamRange layer_range(int layer) const { return layout().layer_range(layer); }
  const ParamLayout& layout() const { return stack_.layout(); }
  ParamStore& store() { return stack_.store(); }
  LayerStack& stack() { return stack_; }
  // fp32 flat params / grads (Precision::kFp32 only; use store() for bf16).
  std::span<float> params() { return store().params(); }
  std::span<float> grads() { return store().grads(); }
  void zero_grad() { store().zero_grad(); }
  // Bytes of weights, gradients and activations; an optimizer may record into it too.
  MemoryLedger& memory() { return stack_.memory(); }

  // y (B, O) = model(x (B, D)).
  void forward(std::span<const float> x, int batch, std::span<float> y);

  // Runs forward and backward on `batch` samples x (B, D) with targets (B, O) and returns
  // the mean loss. Gradients ACCUMULATE: grads += grad_scale * d(sum of per-sample losses).
  // grad_scale = 1/B gives the mean's gradient, 1 the sum's. For DDP to match gradient
  // accumulation bit for bit, both pass the same grad_scale (e.g. 1/global_batch) on the
  // same micro-batch into zeroed grads, then sum the micro-batch gradients in the same order.
  float forward_backward(std::span<const float> x, std::span<const float> targets, int batch,
                         float grad_scale, LayerHooks* hooks = nullptr);
  // As above with grad_scale = 1/batch: the gradient of the mean loss.
  float forward_backward(std::span<const float> x, std::span<const float> targets, int batch,
                         LayerHooks* hooks = nullptr) {
    return forward_backward(x, targets, batch, 1.0f / static_cast<float>(batch), hooks);
  }
  // As forward_backward, but the gradients are OVERWRITTEN: grads = grad_scale * d(sum of
  // per-sample losses), bit for bit what zero_grad() then forward_backward() leaves, without
  // the zeroing pass (and the weight-gradient GEMMs' reads of those zeros).
  float forward_backward_overwrite(std::span<const float> x, std::span<const float> targets,
                                   int batch, float grad_scale, LayerHooks* hooks = nullptr);
  // Forward, backward and one plain SGD step `u` in one pass, the update applied to each
  // parameter as soon as its gradient is computed and the gradients never stored (grads()
  // keeps what it held): bitwise forward_backward_overwrite then Sgd::step (momentum 0).
  // Precision::kFp32 only. Returns the mean loss.
  float forward_backward_sgd(std::span<const float> x, std::span<const float> targets, int batch,
                             float grad_scale, const SgdUpdate& u);

 private:
  // Forward, the loss, then backward, or backward_sgd when `sgd` is given.
  float run(std::span<const float> x, std::span<const float> targets, int batch, float grad_scale,
            LayerHooks* hooks, bool write_grads, const SgdUpdate* sgd = nullptr);

  MlpConfig config_;
  LayerStack stack_;
  MseLoss loss_;
};

}  // namespace dtsim::model
