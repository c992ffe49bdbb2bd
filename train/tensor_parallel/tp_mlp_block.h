// Tensor parallelism for the MLP (Megatron-LM's MLP split): each block is model::MlpBlock
// given its tp rank's shard of the hidden width and Megatron's f and g as one all_reduce on
// the tp group (model/hidden_sharding.h; model/mlp_layers.h states the algorithm):
//
//   forward:  column-parallel W1, local GELU, row-parallel W2, all_reduce (g), + b2, + x
//   backward: local weight gradients; the input gradient through the local W1 rows,
//             all_reduce (f's backward) when the input gradient is asked for
//
// Tensors: "<name>.w1" (H/T, D), ".b1" (H/T), ".w2" (D, H/T), ".b2" (D), each a TensorShard
// of the full model's tensor, so weights load from and gather to mlp_layout() by name.
#pragma once

#include "model/layer.h"
#include "model/mlp.h"
#include "train/traced_comm.h"

namespace dtsim::train {

// The MLP's layers on tensor-parallel rank `tp_rank` of `tp_size`: sharded MlpBlocks, then
// the replicated head (tp null: for their layout only). `tp` must outlive the layers.
model::Layers tp_mlp_layers(const model::MlpConfig& config, int tp_rank, int tp_size,
                            TracedComm* tp);

}  // namespace dtsim::train
