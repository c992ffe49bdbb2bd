// LayerStack: a contiguous range of a model's layers with their parameters, the unit a rank
// runs (the whole model, or one pipeline stage / chunk). Forward and backward are separate
// calls on a numbered pass: pass p holds one micro-batch's saved activations from its
// forward until its backward, so several micro-batches can be in flight (a pipeline
// schedule runs F0 F1 B0 F2 B1 ...); passes are reused, and buffers follow the batch of
// the last forward.
//
//   stack.forward(p, x, B, hooks)     -> y (B, out): the stack's output, kept in pass p
//   loss.forward_backward(y, t, ..., stack.loss_grad(B))  (the last stage only)
//   stack.backward(p, dy, scale, ...) -> dx (B, in) for the previous stage (or nothing)
//   or, split (ZB-H1): stack.backward_input(p, dy, scale, ...) -> dx, later
//                      stack.backward_weight(p, scale) -> the weight gradients
//
// Layer hooks (hooks.h) see the stack's own layer numbers 0..num_layers()-1, which are
// also the layers of its ParamStore's layout.
//
// Memory: activations (pass inputs and outputs, layer states, workspaces, gradient buffers)
// are recorded in the stack's ledger together with its weights and gradients;
// activation_peak() is the most they reached.
//
// Activation recomputation (Korthikanti et al. 2022; Megatron-LM's --recompute-granularity)
// trades compute for activation memory, with gradients bitwise those without it:
//   kNone       every layer's state lives from its pass's forward to its backward.
//   kSelective  layers with recomputes_selectively() keep only their expensive tensors and
//               rebuild the cheap elementwise ones just before backward (Layer::rebuild_state):
//               MlpBlock keeps its pre-activation W1 x + b1 (B, H) and drops gelu(pre) and
//               gelu'(pre) (B, H each); MoeBlock drops every expert's GELU output (n_e, F).
//               Linear saves nothing in forward either way.
//   kFull       a pass keeps its input and every layer's output (the next layer's input,
//               Megatron's per-layer checkpoint) and no layer state: forward frees each
//               layer's state as soon as the layer is done, and backward re-runs layer i's
//               forward from its kept input just before layer i's backward, then frees it
//               again. One extra forward per step; at most one layer's state is live at once
//               (under the split backward, a pass's rebuilt states live from backward_input
//               to backward_weight). The output of the recomputed forward is discarded.
// Recomputed states are allocated and freed per layer per step (the memory is really given
// back), which costs time; bench/ measures speed, not this.
//
// Thread safety: none; one stack belongs to one rank thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "model/hooks.h"
#include "model/layer.h"
#include "model/memory.h"
#include "model/param_store.h"

namespace dtsim::model {

// The layout a sequence of layers gives, layer after layer.
ParamLayout layout_of(const Layers& layers);

enum class Recompute { kNone, kSelective, kFull };
// "none", "selective", "full".
const char* recompute_name(Recompute r);

class LayerStack {
 public:
  // `copy_input`: a pass saves a copy of its input (false: the caller's x must stay valid
  // and unchanged until the pass's backward). `recompute`: see above.
  LayerStack(Layers layers, Precision precision, bool copy_input = true,
             Recompute recompute = Recompute::kNone);
  LayerStack(const LayerStack&) = delete;
  LayerStack& operator=(const LayerStack&) = delete;

  int num_layers() const { return static_cast<int>(layers_.size()); }
  Layer& layer(int i) { return *layers_[i]; }
  int in_dim() const { return layers_.front()->in_dim(); }
  int out_dim() const { return layers_.back()->out_dim(); }
  ParamStore& store() { return store_; }
  const ParamLayout& layout() const { return store_.layout(); }
  MemoryLedger& memory() { return ledger_; }
  Recompute recompute() const { return recompute_; }
  // The most activation bytes live at once since construction (memory().reset_peaks()
  // restarts it).
  int64_t activation_peak() const { return ledger_.peak_bytes(MemoryCategory::kActivations); }

  // Forward of one micro-batch x (B, in) in pass `pass`; returns its output (B, out), valid
  // until the pass's next forward.
  std::span<const float> forward(int pass, std::span<const float> x, int batch,
                                 LayerHooks* hooks = nullptr);
  // A buffer of (B, out) floats for the loss gradient, valid until the next call.
  std::span<float> loss_grad(int batch);
  // Backward of pass `pass` from dy (B, out), which it may overwrite: gradients accumulate
  // into the store (scale.write_grads: overwrite it, bitwise zero_grad then accumulate); returns
  // the input gradient (B, in), valid until the next backward, or nothing when !input_grad (the
  // stack's input is the data).
  std::span<const float> backward(int pass, std::span<float> dy, const BackwardScale& scale,
                                  LayerHooks* hooks = nullptr, bool input_grad = false);
  // SGD in backward (every layer fuses_sgd(), fp32 store): backward with
  // scale.write_grads, except that each layer applies `u` to its parameters as it computes
  // their gradients (Layer::backward_sgd) and the store's gradients are left as they were.
  // Bitwise backward then Sgd::step (momentum 0) over all parameters. Hooks run as in
  // backward (there are no gradients for after_backward to read). Under kFull the pass must
  // be the only one in flight (a later pass's recomputed forward would read parameters this
  // one updated): std::logic_error otherwise.
  bool fuses_sgd() const;
  std::span<const float> backward_sgd(int pass, std::span<float> dy, const BackwardScale& scale,
                                      const SgdUpdate& u, LayerHooks* hooks = nullptr,
                                      bool input_grad = false);
  // ZB-H1's split backward of pass `pass` (every layer splits_backward()): backward_input
  // is backward without the weight gradients (same dy, input_grad and result); the pass
  // then keeps its activations and each layer's saved gradients until backward_weight adds
  // the weight gradients into the store, layer by layer as backward does. Bitwise, input
  // then weight is backward. Hooks: before_backward and after_backward_input around each
  // layer's input half, after_backward after its weight half.
  bool splits_backward() const;
  std::span<const float> backward_input(int pass, std::span<float> dy, const BackwardScale& scale,
                                        bool input_grad = false, LayerHooks* hooks = nullptr);
  void backward_weight(int pass, const BackwardScale& scale, LayerHooks* hooks = nullptr);
  // The state layer `layer` saved in pass `pass`'s last forward (under kFull an empty one
  // outside that layer's backward).
  LayerState& state(int pass, int layer) { return *passes_.at(pass)->states[layer]; }

 private:
  struct Pass {
    int capacity = 0;                        // batch the buffers are sized for
    int batch = 0;                           // batch of the last forward
    bool in_flight = false;                  // forward done, backward (weight) not yet
    std::span<const float> input;            // the input the first layer saw
    TrackedBuffer<float> input_copy;         // (B, in) when copy_input
    std::vector<TrackedBuffer<float>> outs;  // (B, out_i) per layer
    std::vector<std::unique_ptr<LayerState>> states;
  };
  Pass& pass(int p, int batch);
  // Layer i's input in pass s.
  std::span<const float> input_of(Pass& s, int i);
  // Before layer i's backward of pass s: rebuilds what recomputation dropped from its state.
  void rebuild(Pass& s, int i);
  // After layer i's backward (or backward_weight): frees what rebuild() made.
  void release(Pass& s, int i);
  // Replaces layer i's state in pass s by a fresh, empty one (frees the old one's buffers).
  void fresh_state(Pass& s, int i);
  // backward's loop over the layers; `split`: the input halves only; `sgd`: backward_sgd.
  std::span<const float> run_backward(Pass& s, std::span<float> dy, const BackwardScale& scale,
                                      LayerHooks* hooks, bool input_grad, bool split,
                                      const SgdUpdate* sgd = nullptr);

  MemoryLedger ledger_;
  Layers layers_;
  ParamStore store_;
  bool copy_input_;
  Recompute recompute_;
  std::vector<std::unique_ptr<Pass>> passes_;
  int ws_batch_ = 0;   // the batch the workspaces are sized for
  Workspace ws_;       // layers' scratch
  Workspace grad_ws_;  // slots 0, 1: backward's gradient buffers; 2: the loss gradient
  Workspace redo_ws_;  // kFull: slot 0 takes the recomputed forward's (discarded) output
};

// Targets of one micro-batch: regression values (B, O) or class labels (B).
struct Targets {
  std::span<const float> values;
  std::span<const int32_t> labels;
};

// The objective on the last layer's output.
class Loss {
 public:
  virtual ~Loss() = default;
  // Returns the mean loss of y (B, C) and OVERWRITES dy (B, C) with grad_scale times the
  // gradient of the sum of the per-sample losses.
  virtual float forward_backward(std::span<const float> y, const Targets& targets, int batch,
                                 float grad_scale, std::span<float> dy) = 0;
};

// Mean over samples of mean_j (y_j - t_j)^2.
class MseLoss : public Loss {
 public:
  explicit MseLoss(int cols) : cols_(cols) {}
  float forward_backward(std::span<const float> y, const Targets& targets, int batch,
                         float grad_scale, std::span<float> dy) override;

 private:
  int cols_;
};

// Mean over samples of -log softmax(y)[label]; keeps the probabilities (activations).
// With `positions` P > 1 (a sequence model's next-token loss), a sample's y is (P, C) and
// its labels are P: the per-sample loss is the mean over its P positions, so the returned
// loss is the mean over all B P positions and grad_scale = 1/B still gives its gradient.
class CrossEntropyLoss : public Loss {
 public:
  CrossEntropyLoss(int classes, MemoryLedger* ledger, int positions = 1)
      : classes_(classes), positions_(positions), ledger_(ledger) {}
  float forward_backward(std::span<const float> y, const Targets& targets, int batch,
                         float grad_scale, std::span<float> dy) override;

 private:
  int classes_;
  int positions_;
  MemoryLedger* ledger_;
  TrackedBuffer<float> probs_;  // (B, C)
};

}  // namespace dtsim::model
