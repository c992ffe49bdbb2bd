// TpMlpBlock: one tensor-parallel rank's shard of model::MlpBlock (Megatron-LM's MLP split),
// a drop-in replacement layer.
//
// The first Linear is column-parallel: tp rank r of T holds rows [r H/T, (r+1) H/T) of W1
// (H, D) and of b1; GELU runs on those H/T local features; the second Linear is
// row-parallel: the rank holds the same H/T columns of W2 (D, H). Each rank's W2 product is a
// partial sum of the block output, which one all_reduce completes (Megatron's g operator)
// before b2 and the residual are added. In backward the block's input gradient is a partial
// sum too (through the local W1 rows) and one all_reduce completes it (the f operator's
// backward); the stack asks for no input gradient below its first layer, and then there is
// no all_reduce. b2 is replicated: every rank computes its gradient from the same
// all-reduced activations with the same deterministic kernels, so it is bitwise identical
// without any collective.
//
// Tensors: "<name>.w1" (H/T, D), ".b1" (H/T), ".w2" (D, H/T), ".b2" (D), each a TensorShard
// of the full model's tensor, so weights load from and gather to mlp_layout() by name.
#pragma once

#include <string>

#include "model/layer.h"
#include "model/mlp.h"
#include "model/mlp_layers.h"
#include "train/traced_comm.h"

namespace dtsim::train {

class TpMlpBlock : public model::Layer {
 public:
  // Rank `tp_rank` of a `tp_size`-wide tensor-parallel group `tp` (null: a layer that only
  // describes its tensors); hidden % tp_size == 0. `tp` must outlive the layer.
  TpMlpBlock(std::string name, int dim, int hidden, int tp_rank, int tp_size, TracedComm* tp);
  void add_params(model::ParamLayout& layout) const override;
  int in_dim() const override { return dim_; }
  int out_dim() const override { return dim_; }
  bool backward_in_place() const override { return true; }
  // backward and backward_weight honour BackwardScale::write_grads.
  bool writes_grads() const override { return true; }
  std::unique_ptr<model::LayerState> make_state(model::MemoryLedger* ledger) const override;
  // One all_reduce of the (B, D) output.
  void forward(std::span<const float> params, std::span<const float> x, int batch,
               std::span<float> y, model::LayerState& state, model::Workspace& ws) override;
  // One all_reduce of the (B, D) input gradient, when dx is asked for. Workspace slots 0, 1
  // (B, H/T) and 2 (B, D).
  void backward(std::span<const float> params, std::span<const float> x, std::span<const float> dy,
                const model::BackwardScale& scale, std::span<float> grads, std::span<float> dx,
                model::LayerState& state, model::Workspace& ws) override;
  // ZB-H1's split: the input half keeps dy (B, D) and the pre-activation gradient (B, H/T)
  // in the state and does backward's all_reduce (when dx is asked for); the weight half is
  // local.
  bool splits_backward() const override { return true; }
  void backward_input(std::span<const float> params, std::span<const float> x,
                      std::span<const float> dy, const model::BackwardScale& scale,
                      std::span<float> dx, model::LayerState& state, model::Workspace& ws) override;
  void backward_weight(std::span<const float> x, const model::BackwardScale& scale,
                       std::span<float> grads, model::LayerState& state,
                       model::Workspace& ws) override;

 private:
  void input_part(std::span<const float> p, std::span<const float> dy,
                  const model::MlpBlockState& s, int batch, std::span<float> dpre) const;
  void weight_part(std::span<const float> x, std::span<const float> dy, std::span<const float> dpre,
                   const model::MlpBlockState& s, int batch, bool write, std::span<float> g) const;
  void finish_dx(std::span<const float> p, std::span<const float> dy, std::span<const float> dpre,
                 int batch, std::span<float> dx, model::Workspace& ws) const;

  std::string name_;
  int dim_, hidden_, local_hidden_, tp_rank_;
  TracedComm* tp_;
};

// The MLP's layers on tensor-parallel rank `tp_rank` of `tp_size`: TpMlpBlocks, then the
// replicated head (tp null: for their layout only).
model::Layers tp_mlp_layers(const model::MlpConfig& config, int tp_rank, int tp_size,
                            TracedComm* tp);

}  // namespace dtsim::train
