// The layers the MLP (and the MoE classifier's embedding and head) are built from:
//
//   Linear:    y = W x + b                                  W (out, in), b (out)
//   MlpBlock:  y = x + W2 gelu(W1 x + b1) + b2              W1 (H, D), W2 (D, H)
//
// Tensor parallelism gives MlpBlock a HiddenSharding (Megatron's column/row split with f and
// g injected; train/tensor_parallel/ builds it on the tp group).
#pragma once

#include <string>

#include "model/hidden_sharding.h"
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
//
// Tensor parallel (given f and g: sharding.reduce set, at any size T, Megatron-LM's MLP
// split): the rank holds H/T hidden units, w1 (H/T, D), b1 (H/T) and w2 (D, H/T) each a
// TensorShard of the whole tensor, b2 replicated. The W2 product (without b2) is a partial sum that
// g (sharding.reduce, one all_reduce of (B, D)) completes before b2 and the residual are added; in
// backward the input gradient through the local W1 rows is a partial sum that f's backward
// completes (workspace slot 2 (B, D); no reduce when no input gradient is asked for). Every rank
// computes b2's gradient from the same replicated dy, bitwise alike. No selective
// recomputation and no SGD in backward then.
class MlpBlock : public Layer {
 public:
  // `hidden` is the whole block's H; without sharding.reduce, the plain block (size 1).
  MlpBlock(std::string name, int dim, int hidden, HiddenSharding sharding = {});
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
  bool fuses_sgd() const override { return !sharded(); }
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
  bool recomputes_selectively() const override { return !sharded(); }
  void rebuild_state(std::span<const float> params, std::span<const float> x, int batch,
                     LayerState& state) override;
  void release_rebuilt(LayerState& state) override;

 private:
  // Given f and g (sharding.reduce): the tensor-parallel order, at any size.
  bool sharded() const { return static_cast<bool>(sharding_.reduce); }
  // The tensor-parallel forward (g between the W2 product and b2).
  void forward_sharded(std::span<const float> p, std::span<const float> x, int batch,
                       std::span<float> y, MlpBlockState& s) const;
  void input_part(std::span<const float> p, std::span<const float> dy, const MlpBlockState& s,
                  int batch, std::span<float> dpre) const;
  void weight_part(std::span<const float> x, std::span<const float> dy, std::span<const float> dpre,
                   const MlpBlockState& s, int batch, bool write, std::span<float> g) const;
  void finish_dx(std::span<const float> p, std::span<const float> x, std::span<const float> dy,
                 std::span<const float> dpre, int batch, std::span<float> dx, Workspace& ws) const;

  std::string name_;
  int dim_, hidden_;  // hidden_: this rank's H / T
  int full_hidden_;   // H
  HiddenSharding sharding_;
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
// of them) and GELU outputs; for a split backward also its
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
