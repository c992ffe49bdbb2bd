// The layers the MLP (and the MoE classifier's embedding and head) are built from:
//
//   Linear:    y = W x + b                                  W (out, in), b (out)
//   MlpBlock:  y = x + W2 gelu(W1 x + b1) + b2              W1 (H, D), W2 (D, H)
//
// Tensor parallelism replaces MlpBlock with a column/row-parallel block of the same
// tensors (train/tensor_parallel/); the block's tensor offsets are shared through
// MlpBlockOffsets so there is one copy of them.
#pragma once

#include <string>

#include "model/layer.h"

namespace dtsim::model {

// Offsets of a block's tensors w1 (h, d), b1 (h), w2 (d, h), b2 (d) inside its layer, for
// hidden width h (the local width under tensor parallelism).
struct MlpBlockOffsets {
  size_t w1, b1, w2, b2;
  MlpBlockOffsets(int dim, int hidden)
      : w1(0),
        b1(size_t(hidden) * dim),
        w2(size_t(hidden) * dim + hidden),
        b2(2 * size_t(hidden) * dim + hidden) {}
};

struct MlpBlockState;

// A fully connected layer "<name>.w" (out, in), "<name>.b" (out).
class Linear : public Layer {
 public:
  Linear(std::string name, int in, int out) : name_(std::move(name)), in_(in), out_(out) {}
  void add_params(ParamLayout& layout) const override;
  int in_dim() const override { return in_; }
  int out_dim() const override { return out_; }
  bool writes_grads() const override { return true; }
  std::unique_ptr<LayerState> make_state(MemoryLedger* ledger) const override;
  void forward(std::span<const float> params, std::span<const float> x, int batch,
               std::span<float> y, LayerState& state, Workspace& ws) override;
  void backward(std::span<const float> params, std::span<const float> x, std::span<const float> dy,
                const BackwardScale& scale, std::span<float> grads, std::span<float> dx,
                LayerState& state, Workspace& ws) override;
  bool fuses_sgd() const override { return true; }
  void backward_sgd(std::span<float> params, std::span<const float> x, std::span<const float> dy,
                    const BackwardScale& scale, const SgdUpdate& u, std::span<float> dx,
                    LayerState& state, Workspace& ws) override;
  // The split keeps dy (B, out) in the state.
  bool splits_backward() const override { return true; }
  void backward_input(std::span<const float> params, std::span<const float> x,
                      std::span<const float> dy, const BackwardScale& scale, std::span<float> dx,
                      LayerState& state, Workspace& ws) override;
  void backward_weight(std::span<const float> x, const BackwardScale& scale, std::span<float> grads,
                       LayerState& state, Workspace& ws) override;

 private:
  std::string name_;
  int in_, out_;
};

// A residual Linear-GELU-Linear block "<name>.w1" (H, D), ".b1" (H), ".w2" (D, H), ".b2" (D).
// Saves gelu'(pre) (in MlpBlockState::pre) and hid = gelu(pre), pre = W1 x + b1, (B, H)
// each; backward uses workspace slots 0 and 1 (B, H) and may run in place (dx aliasing dy).
// Selective recomputation: a selective state saves pre itself (B, H) only (forward puts
// gelu(pre) in workspace slot 0); rebuild_state recomputes gelu(pre) and gelu'(pre) from it,
// bitwise what forward saves otherwise; release_rebuilt frees hid again.
class MlpBlock : public Layer {
 public:
  MlpBlock(std::string name, int dim, int hidden)
      : name_(std::move(name)), dim_(dim), hidden_(hidden) {}
  void add_params(ParamLayout& layout) const override;
  int in_dim() const override { return dim_; }
  int out_dim() const override { return dim_; }
  bool backward_in_place() const override { return true; }
  bool writes_grads() const override { return true; }
  std::unique_ptr<LayerState> make_state(MemoryLedger* ledger) const override;
  void forward(std::span<const float> params, std::span<const float> x, int batch,
               std::span<float> y, LayerState& state, Workspace& ws) override;
  void backward(std::span<const float> params, std::span<const float> x, std::span<const float> dy,
                const BackwardScale& scale, std::span<float> grads, std::span<float> dx,
                LayerState& state, Workspace& ws) override;
  // W2 is updated after dh has read it, W1 after dx has.
  bool fuses_sgd() const override { return true; }
  void backward_sgd(std::span<float> params, std::span<const float> x, std::span<const float> dy,
                    const BackwardScale& scale, const SgdUpdate& u, std::span<float> dx,
                    LayerState& state, Workspace& ws) override;
  // The split keeps dy (B, D) and the pre-activation gradient (B, H) in the state; its
  // input half uses workspace slot 0 (B, H).
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

 private:
  void input_part(std::span<const float> p, std::span<const float> dy, const MlpBlockState& s,
                  int batch, std::span<float> dpre) const;
  void weight_part(std::span<const float> x, std::span<const float> dy, std::span<const float> dpre,
                   const MlpBlockState& s, int batch, bool write, std::span<float> g) const;
  void finish_dx(std::span<const float> p, std::span<const float> x, std::span<const float> dy,
                 std::span<const float> dpre, int batch, std::span<float> dx) const;

  std::string name_;
  int dim_, hidden_;
};

// Sizes `b` for n activation floats (contents unspecified) unless it has that size.
inline void ensure_size(TrackedBuffer<float>& b, MemoryLedger* ledger, size_t n) {
  if (b.size() == n) return;
  b.release();  // before the new one: the ledger's peak never holds both
  b = TrackedBuffer<float>(ledger, MemoryCategory::kActivations, n);
}

// What a Linear keeps for a split backward's weight half: its output gradient (B, out).
struct LinearState : LayerState {
  explicit LinearState(MemoryLedger* ledger) : ledger(ledger) {}
  MemoryLedger* ledger;
  TrackedBuffer<float> dy;  // allocated by the first backward_input
};

// What a block saves per micro-batch: (B, H) GELU derivatives at the pre-activations (the
// forward writes them over the pre-activations, gelu_forward_keep_grad: all a backward reads
// of them; MlpBlock and train/'s TpMlpBlock alike) and GELU outputs; for a split backward also its
// output gradient dy (B, D) and pre-activation gradient dpre (B, H), allocated by the first
// backward_input.
struct MlpBlockState : LayerState {
  explicit MlpBlockState(MemoryLedger* ledger) : ledger(ledger) {}
  // Sizes pre and hid for n elements each.
  void ensure(size_t n) {
    ensure_size(pre, ledger, n);
    ensure_size(hid, ledger, n);
  }
  MemoryLedger* ledger;
  TrackedBuffer<float> pre, hid;
  TrackedBuffer<float> dy, dpre;
};

}  // namespace dtsim::model
