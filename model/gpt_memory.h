// The activation floats one rank's GPT stack (gpt_layers.h on a LayerStack, its cross-
// entropy loss on the same ledger) keeps for one micro-batch, tensor by tensor as the layers
// save them: Korthikanti et al. 2022's s b h (34 + 5 a s / h) count redone for dtsim
// (docs/gpt.md), in fp32, with the attention kernel's per-row log-sum-exp in place of the
// s x s softmax and with LayerNorm's mean and rstd counted.
//
// With N = B S tokens (S / n of each sample on a context-parallel rank of n), N' = N / t
// under sequence parallelism (else N), E = H hs, per transformer layer (an attention block
// and an MLP block):
//   outputs   2 N' D       the two blocks' outputs (the next norms' inputs)
//   norm ins  2 N D        LN(x) before QKV and fc1 (all-gathered under sequence parallelism)
//   stats     4 N'         the two norms' mean and rstd
//   attention N (4 E + H) / t   q, k, v, the attention output and each row's LSE
//   mlp       2 N F / t    gelu(pre) and gelu'(pre)
// plus, once: the input ids B S (whole samples), the embedding's output N' D, the final
// norm's output N D, its stats 2 N (and its gathered input N D under sequence parallelism),
// the logits N V, the loss's probabilities and gradient 2 N V, backward's two gradient
// buffers (N D and N' D) and the layers' shared workspaces (layer.h: each slot as large as
// its largest use).
// Full recomputation (layer_stack.h) keeps the outputs and only the largest layer's state
// (during that layer's backward), plus the recomputed forward's discarded output.
// Selective recomputation (Korthikanti et al.'s core attention; the GELU as MlpBlock's)
// keeps neither the attention output nor gelu(pre) (N (E + F) / t less per layer) and
// rebuilds the larger of them during one layer's backward.
// Context parallelism (n > 1) adds each layer's ring attention scratch (ring_attention.h),
// held from the layer's first forward and backward on, whatever is recomputed:
//   ring      (8 N E + N H) / t + c (hs + 1)   K/V held and incoming, dK/dV travelling and
//             incoming, delta; one block's output and LSE (c = S / 2n, a chunk)
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>

#include "model/gpt_model.h"
#include "model/layer_stack.h"

namespace dtsim::model {

struct GptActivationShape {
  int64_t batch = 1;  // samples in the micro-batch
  int tp = 1;         // tensor-parallel width t
  bool sequence_parallel = false;
  Recompute recompute = Recompute::kNone;
  int layers = -1;  // blocks this rank holds (-1: all)
  int cp = 1;       // context-parallel width n (ring attention)
};

// The count above in floats, by part.
struct GptActivationFloats {
  int64_t per_layer = 0;  // one transformer layer's saved tensors (full: without recomputing)
  int64_t layers = 0;     // every layer's (under full recomputation: the kept outputs only)
  int64_t rest = 0;       // input, embedding, final norm, head, loss, gradient buffers
  int64_t workspace = 0;  // the shared workspaces (and recomputation's largest state)
  int64_t ring = 0;       // every layer's ring attention scratch (context parallel only)
  int64_t total() const { return layers + rest + workspace + ring; }
};

GptActivationFloats gpt_activation_floats(const GptConfig& config, const GptActivationShape& shape);

}  // namespace dtsim::model
