// The per-layer model API (llm.c's forward/backward pairs, picotron's layer slicing): a model
// is a sequence of Layers, run by a LayerStack (layer_stack.h) over a contiguous range of
// them. A layer owns no parameters and no activations: its parameters are one contiguous
// range of the stack's ParamStore (the layer's ParamLayout layer), what forward saves for
// backward lives in a LayerState the caller keeps per micro-batch, and scratch that only
// lives inside one call comes from a Workspace shared by every layer of the stack. So one
// stack can hold several micro-batches in flight (a pipeline stage), and a tensor- or
// expert-parallel layer (train/) replaces a plain one without the model knowing of ranks.
//
// Thread safety: none; a layer, its states and the workspace belong to one rank thread.
#pragma once

#include <memory>
#include <span>
#include <stdexcept>
#include <vector>

#include "model/memory.h"
#include "model/param_layout.h"
#include "model/sgd_update.h"

namespace dtsim::model {

// What one layer saved in forward for one micro-batch's backward. `selective` is set by
// the stack before forward when the layer recomputes selectively (Layer::rebuild_state).
class LayerState {
 public:
  virtual ~LayerState() = default;
  bool selective = false;
};

// Scratch buffers for the inside of one forward or backward call, recorded as activations:
// slot i grows to the largest size asked for and is shared by every layer that asks for it;
// clear() frees them all (the stack does when the batch changes).
class Workspace {
 public:
  explicit Workspace(MemoryLedger* ledger) : ledger_(ledger) {}
  // The first n floats of slot `slot` (contents unspecified).
  std::span<float> take(int slot, size_t n) {
    if (slots_.size() <= size_t(slot)) slots_.resize(slot + 1);
    TrackedBuffer<float>& b = slots_[slot];
    if (b.size() < n) {
      b.release();  // before the larger one: the ledger's peak never holds both
      b = TrackedBuffer<float>(ledger_, MemoryCategory::kActivations, n);
    }
    return b.span().first(n);
  }
  void clear() { slots_.clear(); }

 private:
  MemoryLedger* ledger_;
  std::vector<TrackedBuffer<float>> slots_;
};

// What backward needs from the objective besides dy.
struct BackwardScale {
  float grad_scale = 1;      // the loss gradient's scale (1/B: the mean over B samples)
  int batch = 0;             // samples in the micro-batch
  bool write_grads = false;  // grads = this micro-batch's gradient instead of += (see Layer)
};

class Layer {
 public:
  virtual ~Layer() = default;

  // Appends the layer's tensors to `layout` as one layer (begin_layer, then add).
  virtual void add_params(ParamLayout& layout) const = 0;
  // Features per sample of the input and of the output.
  virtual int in_dim() const = 0;
  virtual int out_dim() const = 0;
  // Whether backward may be called with dx and dy the same buffer (in_dim() == out_dim()).
  virtual bool backward_in_place() const { return false; }

  // A fresh state for one micro-batch; activations it saves are recorded in `ledger`.
  virtual std::unique_ptr<LayerState> make_state(MemoryLedger* ledger) const = 0;

  // y (B, out) = layer(x (B, in)) with the layer's parameters; saves in `state` what backward
  // needs. x stays unchanged until the matching backward.
  virtual void forward(std::span<const float> params, std::span<const float> x, int batch,
                       std::span<float> y, LayerState& state, Workspace& ws) = 0;
  // Given dy (B, out) of the same micro-batch: grads (the layer's range) += the weight
  // gradients; dx (B, in) is OVERWRITTEN with the input gradient (empty: not needed).
  // A layer with writes_grads() honours scale.write_grads in backward and backward_weight:
  // it then OVERWRITES grads, bitwise what adding into zeroed grads gives; for other
  // layers LayerStack zero-fills the range and passes write_grads = false.
  virtual bool writes_grads() const { return false; }
  virtual void backward(std::span<const float> params, std::span<const float> x,
                        std::span<const float> dy, const BackwardScale& scale,
                        std::span<float> grads, std::span<float> dx, LayerState& state,
                        Workspace& ws) = 0;

  // SGD in backward (LOMO's fused update, Lv et al. 2023), for layers with fuses_sgd(): what
  // backward with scale.write_grads does, except that the layer never stores its gradients:
  // it applies `u` to each of its parameters (`params`, its range of the store) as soon as
  // that parameter's gradient is computed, reading every parameter it needs (for dx too)
  // before updating it. Bitwise backward then Sgd::step (momentum 0) on the layer's range.
  // The default throws std::logic_error.
  virtual bool fuses_sgd() const { return false; }
  virtual void backward_sgd(std::span<float> params, std::span<const float> x,
                            std::span<const float> dy, const BackwardScale& scale,
                            const SgdUpdate& u, std::span<float> dx, LayerState& state,
                            Workspace& ws);

  // The split backward of ZB-H1 (Qi et al. 2023), for layers with splits_backward():
  // backward_input OVERWRITES dx (B, in) with the input gradient (empty: not needed) and
  // keeps in `state` what backward_weight needs (the output gradient and the gradients
  // inside the layer), so dy may change once it returns (dx may alias dy as in backward);
  // backward_weight then adds the weight gradients of that micro-batch into grads, reading
  // x (unchanged since forward) and the state. Input then weight gives bitwise what backward
  // gives. The defaults throw std::logic_error.
  virtual bool splits_backward() const { return false; }
  virtual void backward_input(std::span<const float> params, std::span<const float> x,
                              std::span<const float> dy, const BackwardScale& scale,
                              std::span<float> dx, LayerState& state, Workspace& ws);
  virtual void backward_weight(std::span<const float> x, const BackwardScale& scale,
                               std::span<float> grads, LayerState& state, Workspace& ws);

  // Selective recomputation (Korthikanti et al. 2022, section 5), for layers with
  // recomputes_selectively(): given a state with `selective` set, forward saves only what is
  // expensive to recompute (linear outputs) and keeps the cheap elementwise results out of
  // the state; rebuild_state then restores them from what was saved (and x), so that the
  // state is bitwise what forward saves without `selective`; release_rebuilt frees what
  // rebuild_state allocated once the state's backward (or backward_weight) is done. Which
  // tensors are dropped is stated by each layer. The defaults do nothing (nothing dropped).
  virtual bool recomputes_selectively() const { return false; }
  virtual void rebuild_state(std::span<const float> /*params*/, std::span<const float> /*x*/,
                             int /*batch*/, LayerState& /*state*/) {}
  virtual void release_rebuilt(LayerState& /*state*/) {}
};

inline void Layer::backward_sgd(std::span<float>, std::span<const float>, std::span<const float>,
                                const BackwardScale&, const SgdUpdate&, std::span<float>,
                                LayerState&, Workspace&) {
  throw std::logic_error("this layer cannot apply SGD in backward (fuses_sgd() is false)");
}
inline void Layer::backward_input(std::span<const float>, std::span<const float>,
                                  std::span<const float>, const BackwardScale&, std::span<float>,
                                  LayerState&, Workspace&) {
  throw std::logic_error("this layer has no split backward (splits_backward() is false)");
}
inline void Layer::backward_weight(std::span<const float>, const BackwardScale&, std::span<float>,
                                   LayerState&, Workspace&) {
  throw std::logic_error("this layer has no split backward (splits_backward() is false)");
}

using Layers = std::vector<std::unique_ptr<Layer>>;

}  // namespace dtsim::model
