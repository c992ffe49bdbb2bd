// TpMlp: one tensor-parallel rank's shard of model::MlpModel (Megatron-LM's MLP split).
//
// In block l the first Linear is column-parallel: tp rank r of T holds rows
// [r H/T, (r+1) H/T) of W1 (H, D) and of b1; GELU runs on those H/T local features; the
// second Linear is row-parallel: the rank holds the same H/T columns of W2 (D, H). Each rank's
// W2 product is a partial sum of the block output, which one all_reduce completes (Megatron's
// g operator) before b2 and the residual are added. In backward the block's input gradient is
// a partial sum too (through the local W1 rows) and one all_reduce completes it (the f
// operator's backward). b2 and the head are replicated: every rank computes their gradients
// from the same all-reduced activations with the same deterministic kernels, so they are
// bitwise identical without any collective (the run checks it).
//
// Local layout (model::ParamLayout): layer l < L "block<l>.w1" (H/T, D), ".b1" (H/T), ".w2"
// (D, H/T), ".b2" (D); layer L "head.w" (O, D), "head.b" (O). Slices map it onto the full
// mlp_layout() so tests and the trainer can copy the reference's weights in and gather out.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "model/memory.h"
#include "model/mlp.h"
#include "model/param_store.h"
#include "runtime/communicator.h"
#include "train/config.h"
#include "train/result.h"
#include "train/traced_comm.h"

namespace dtsim::train {

// A contiguous run of `count` elements at `local` in the shard and `full` in mlp_layout().
struct ParamSlice {
  size_t local = 0;
  size_t full = 0;
  size_t count = 0;
};

// Thread safety: none; one shard per rank thread.
class TpMlp {
 public:
  // The shard of tensor-parallel rank `tp_rank` of `tp_size`; hidden_dim % tp_size == 0.
  TpMlp(const model::MlpConfig& config, int tp_rank, int tp_size, model::Precision precision);
  TpMlp(const TpMlp&) = delete;
  TpMlp& operator=(const TpMlp&) = delete;

  model::ParamStore& store() { return store_; }
  model::MemoryLedger& memory() { return ledger_; }

  // Loads this rank's slices of a full mlp_layout() parameter vector.
  void load_full(std::span<const float> full);
  // Writes a local buffer (params or grads, local layout) into its slices of `full`.
  void scatter_to_full(std::span<const float> local, std::span<float> full) const;

  // y (B, O) = model(x (B, D)); one all_reduce per block on the tensor-parallel group `tp`.
  void forward(std::span<const float> x, int batch, std::span<float> y, TracedComm& tp);
  // Forward and backward on x (B, D), targets (B, O); returns the mean loss. Gradients
  // ACCUMULATE with grads += grad_scale * d(sum of per-sample losses), as MlpModel's.
  // Calls all_reduce L times in forward and L - 1 in backward (block 0's input gradient
  // would only flow into the data, which needs none; MlpModel skips it too).
  float forward_backward(std::span<const float> x, std::span<const float> targets, int batch,
                         float grad_scale, TracedComm& tp);

 private:
  void ensure_batch(int batch);
  void run_forward(std::span<const float> x, int batch, TracedComm& tp);

  model::MlpConfig config_;
  int local_hidden_;  // H / T
  model::MemoryLedger ledger_;
  model::ParamStore store_;
  std::vector<ParamSlice> slices_;
  int batch_ = 0;
  model::TrackedBuffer<float> xs_;    // (L+1, B, D) block inputs; xs_[L] feeds the head
  model::TrackedBuffer<float> pre_;   // (L, B, H/T) local W1 x + b1
  model::TrackedBuffer<float> hid_;   // (L, B, H/T) gelu(pre)
  model::TrackedBuffer<float> out_;   // (B, O) predictions
  model::TrackedBuffer<float> dx_;    // (B, D) gradient down the residual stream (replicated)
  model::TrackedBuffer<float> dxp_;   // (B, D) this rank's partial input gradient of a block
  model::TrackedBuffer<float> dh_;    // (B, H/T)
  model::TrackedBuffer<float> dp_;    // (B, H/T)
  model::TrackedBuffer<float> dout_;  // (B, O)
};

// The local layout of a tensor-parallel MLP shard of width `tp_size`.
model::ParamLayout tp_mlp_layout(const model::MlpConfig& config, int tp_size);
// Where each element of rank `tp_rank`'s shard lives in the full mlp_layout().
std::vector<ParamSlice> tp_mlp_slices(const model::MlpConfig& config, int tp_rank, int tp_size);

// Tensor-parallel training of config.mlp on config.ranks ranks as config.ranks / tp_size
// data-parallel replicas of tp_size-wide TP groups (tensor_parallel.cc); run_tp passes
// tp_size = ranks, run_dp_tp config.tp_size.
std::optional<RunResult> run_tp_grid(const TrainConfig& config, int tp_size);

// A rank's two groups on the (dp, tp) grid: tp = tp_size consecutive ranks, dp = the ranks
// with the same position in every TP group (dp_tp.cc). With one replica, tp is the world
// and dp is null.
struct TpGrid {
  std::unique_ptr<Communicator> tp_owned, dp_owned;
  Communicator* tp = nullptr;
  Communicator* dp = nullptr;
  int dp_index = 0;  // which replica (which slice of the global batch) this rank serves
};
TpGrid make_tp_grid(Communicator& world, int tp_size);

}  // namespace dtsim::train
