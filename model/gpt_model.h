// GptModel: a tiny decoder-only transformer (GPT-2's shape, pre-norm) trained on next-token
// cross-entropy, as a list of plain layers (gpt_layers.h) on a LayerStack.
//
//   h_0 = wte[x] + wpe                               (B, S, D), x token ids as floats
//   h = h + Attn(LN(h));  h = h + MLP(LN(h))         for each of L blocks
//   logits = Wh LN_f(h_L) + bh                       (B, S, V)
//   loss = mean over the B S positions of -log softmax(logits)[next token]
//
// Layers for hooks and layer_range(): 0 "embed"; 1 + 2l "block<l>.attn", 2 + 2l
// "block<l>.mlp" for l < L; 2L + 1 "lnf"; 2L + 2 "head" (Linear D -> V on every token).
#pragma once

#include <cstdint>
#include <span>

#include "model/layer_stack.h"
#include "model/param_store.h"
#include "model/sequence_sharding.h"
#include "model/sequence_task.h"

namespace dtsim::model {

struct GptConfig {
  int vocab = 9;        // V
  int seq_len = 12;     // S
  int d_model = 32;     // D
  int heads = 2;        // H
  int head_dim = 16;    // hs (H hs need not equal D)
  int num_layers = 2;   // L
  int mlp_hidden = 64;  // F
};

// The model's 2L + 3 layers; aborts on a non-positive size. `sharding`: this rank's share
// under tensor (and sequence) parallelism (gpt_layers.h); T must divide H and F (and S).
Layers gpt_layers(const GptConfig& config, const SequenceSharding& sharding = {});
ParamLayout gpt_layout(const GptConfig& config);

// The held-out accuracy on `task`'s answer positions (token_accuracy) of a stack holding a
// whole GPT for it: forward only, of held-out samples [0, count), in the stack's pass `pass`
// (its saved activations are replaced; gradients are untouched).
float heldout_accuracy(LayerStack& stack, const ReverseTask& task, int count, int pass = 0);

// Thread safety: none; a model is used by one thread at a time (each rank owns its own).
class GptModel {
 public:
  // Builds the model with init_params(layout, seed) (each norm starts near the identity:
  // gpt_kernels.h stores its gain as 1 + g).
  GptModel(const GptConfig& config, uint64_t seed, Precision precision = Precision::kFp32);
  GptModel(const GptModel&) = delete;
  GptModel& operator=(const GptModel&) = delete;

  const GptConfig& config() const { return config_; }
  const ParamLayout& layout() const { return stack_.layout(); }
  ParamStore& store() { return stack_.store(); }
  LayerStack& stack() { return stack_; }
  std::span<float> params() { return store().params(); }
  std::span<float> grads() { return store().grads(); }
  void zero_grad() { store().zero_grad(); }

  // logits (B, S, V) of tokens (B, S); valid until the next forward.
  std::span<const float> forward(std::span<const float> tokens, int batch);
  // Forward and backward of tokens (B, S) with next-token labels (B, S); returns the mean
  // loss over the B S positions. Gradients ACCUMULATE: grads += grad_scale * d(sum over
  // samples of each sample's mean loss), so grad_scale = 1/B is the mean's gradient.
  float forward_backward(std::span<const float> tokens, std::span<const int32_t> labels, int batch,
                         float grad_scale);

 private:
  GptConfig config_;
  LayerStack stack_;
  CrossEntropyLoss loss_;
};

}  // namespace dtsim::model
