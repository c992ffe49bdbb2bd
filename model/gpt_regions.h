// The parts the GPT's blocks share around their parallel core (gpt_layers.h): the pre-norm
// at the block's input and the residual output, each in its Megatron region as the block's
// SequenceSharding (sequence_sharding.h) says. With T = sharding.size, a block sees rows_local =
// B S / T token rows under sequence parallelism (this rank's S / T tokens of each sample)
// and rows = B S otherwise; its parallel core (attention heads, MLP hidden units) always
// runs on all B S rows.
//
//                 plain (T = 1)    tensor parallel            + sequence parallel
//   pre-norm      LN(x)            LN(x), replicated          LN(x local), all-gather (f)
//   input grad    dxn              all-reduce dxn (f')        reduce-scatter dxn (f')
//   norm grads    local            local (replicated, alike)  all-reduced over the ranks
//   output        core + b + x     all-reduce (g) + b + x     reduce-scatter (g) + b + x
//   output grad   dy               dy (replicated)            all-gather dy (g')
//
// The output bias's gradient is summed over the full (gathered) dy, so it is complete on
// every rank without a collective. Workspace slots: 4 (B S D: the partial output in
// forward, the gathered dy in backward), 5 (B S D: the sequence permutation), 6 (B S D / T:
// this rank's normalised rows in forward, its dxn rows in backward), 7 (2 D: norm grads).
//
// Thread safety: none, as every Layer.
#pragma once

#include <span>

#include "model/layer.h"
#include "model/memory.h"
#include "model/sequence_sharding.h"

namespace dtsim::model {

// Token rows and sequence slice of a block under `sharding`.
struct TokenRows {
  int batch = 0, seq = 0, seq_local = 0, dim = 0;
  int rows() const { return batch * seq; }
  int rows_local() const { return batch * seq_local; }
};

// all-gathers each sample's token slices: every rank's local (B, S/T, D) -> full (B, S, D);
// scratch holds B S D floats.
void gather_sequence(const SequenceSharding& sh, std::span<const float> local,
                     std::span<float> full, const TokenRows& t, std::span<float> scratch);
// Sums full (B, S, D) over the ranks and keeps this rank's tokens in local (B, S/T, D).
void reduce_scatter_sequence(const SequenceSharding& sh, std::span<const float> full,
                             std::span<float> local, const TokenRows& t, std::span<float> scratch);
// This rank's tokens of full (B, S, D) -> local (B, S/T, D), no communication.
void slice_sequence(const SequenceSharding& sh, std::span<const float> full, std::span<float> local,
                    const TokenRows& t);

// What a pre-norm saves: the normalised input of all B S rows (gathered under sequence
// parallelism) and each local row's mean and rstd.
struct NormState : LayerState {
  explicit NormState(MemoryLedger* ledger) : ledger(ledger) {}
  MemoryLedger* ledger;
  TrackedBuffer<float> xn, mean, rstd;
};

// s.xn (B S, D) = LN(x) of this rank's rows (x: rows_local, D), gathered when sequence
// parallel; g, b the norm's gain and bias.
void prenorm_forward(const SequenceSharding& sh, std::span<const float> g, std::span<const float> b,
                     std::span<const float> x, const TokenRows& t, NormState& s, Workspace& ws);
// Given dxn (B S, D), this rank's part of the gradient at the norm's output (overwritten):
// completes it (f's backward), then dx (rows_local, D; empty: not needed) = dy + the norm's
// input gradient and gg, gb += the norm's parameter gradients (summed over the ranks under
// sequence parallelism).
void prenorm_backward(const SequenceSharding& sh, std::span<float> dxn, std::span<const float> x,
                      std::span<const float> dy, std::span<const float> g, const NormState& s,
                      const TokenRows& t, std::span<float> dx, std::span<float> gg,
                      std::span<float> gb, Workspace& ws);

// Where the block's core writes its output (B S, D) before output(): y itself unless
// sequence parallel (workspace slot 4).
std::span<float> core_output(const SequenceSharding& sh, std::span<float> y, const TokenRows& t,
                             Workspace& ws);
// y (rows_local, D) = g(core) + bias + x, core from core_output() (without the bias when
// sharded; a plain core already holds it and only the residual is added).
void block_output(const SequenceSharding& sh, std::span<float> core, std::span<const float> bias,
                  std::span<const float> x, const TokenRows& t, std::span<float> y, Workspace& ws);
// The output gradient of all B S rows: dy (rows_local, D) itself, or all-gathered (slot 4).
std::span<const float> full_output_grad(const SequenceSharding& sh, std::span<const float> dy,
                                        const TokenRows& t, Workspace& ws);

}  // namespace dtsim::model
