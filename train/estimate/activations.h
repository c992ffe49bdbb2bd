// Activation memory from the architecture.
//
// GPT, 16-bit (bf16 mixed precision, the published-numbers path): Korthikanti et al. 2022,
// "Reducing Activation Recomputation in Large Transformer Models" (arXiv 2205.05198),
// section 4: the bytes one layer saves for backward per micro-batch of b sequences of s
// tokens, 16-bit activations, 1-byte dropout masks:
//
//   no parallelism              s b h (34 + 5 a s / h)
//   tensor parallel t           s b h (10 + 24 / t + 5 a s / (h t))
//   + sequence parallel         s b h / t (34 + 5 a s / h)
//   + selective recomputation   the 5 a s / h term (softmax, its dropout) is recomputed: 0
//   full recomputation          2 s b h (the layer's input; / t with sequence parallelism)
//
// computed here from the per-tensor terms (so grouped-query attention, a SwiGLU MLP of width
// f and no dropout, Llama's shape, count what they save; GPT-3's shape gives the paper's
// 34 and 5 a s / h exactly); context parallelism of width n divides it by n.
//
// GPT, fp32 (`--precision fp32`, what `dtsim train --model gpt` runs): the same per-tensor
// terms in 4-byte elements as dtsim's GPT keeps them (dtsim_gpt_activations below): a
// log-sum-exp per row and head instead of the s x s softmax, the QKV and fc1 inputs kept
// gathered under sequence parallelism, LayerNorm statistics, and per rank once the token
// ids, logits, the loss's buffers, backward's gradient buffers, the layers' shared scratch
// and, under context parallelism, each layer's ring attention scratch.
//
// mlp and moe: the buffers dtsim's own layers allocate (model/layer_stack.cc, mlp_layers.h,
// moe_layer.cc), which `dtsim train --report` measures as the activations category.
//
// Thread safety: pure functions.
#pragma once

#include "model/memory.h"
#include "train/estimate/architecture.h"

namespace dtsim::train::estimator {

enum class Recompute { kNone, kSelective, kFull };

struct ActivationInput {
  int tp = 1;
  bool sequence_parallel = false;
  Recompute recompute = Recompute::kNone;
  int micro_batch = 1;  // b: sequences (gpt) or samples (mlp, moe) per micro-batch
  bool dropout = true;  // gpt: dropout masks (Korthikanti et al. assume dropout)
  int cp = 1;           // gpt: context-parallel width n (s / n tokens of each sequence a rank)
  // gpt: kFp32 counts dtsim's fp32 GPT (dtsim_gpt_activations), kMixedBf16 Korthikanti et
  // al.'s 16-bit tensors; mlp/moe: kMixedBf16 adds the fp32 working copies of a layer.
  model::Precision precision = model::Precision::kMixedBf16;
};

// The activations one micro-batch saves through one layer on one tensor-parallel rank.
struct LayerActivations {
  double tp_sharded = 0;  // bytes divided by t (attention and MLP internals)
  double replicated = 0;  // bytes every tp rank keeps (norm inputs, layer inputs, masks);
                          // divided by t under sequence parallelism
  double scores = 0;      // softmax output, its mask and dropout output (0 when recomputed)
  double total() const { return tp_sharded + replicated + scores; }
};

// gpt, 16-bit: one transformer layer (Korthikanti et al.; in.cp and in.precision unused).
LayerActivations gpt_layer_activations(const GptShape& g, const ActivationInput& in);

// gpt, fp32: the bytes dtsim's GPT saves on one tp and cp rank that holds all L layers, by
// part (activations.cc names every term). dtsim's GPT is multi-head with a GELU MLP and
// LayerNorm; grouped-query K/V, a SwiGLU MLP (gate, up, product) and RMSNorm (one statistic)
// are counted as the same tensors would be. Dropout (dtsim has none) adds Korthikanti et al.'s
// 1-byte masks.
struct GptFp32Activations {
  double layer = 0;      // one transformer layer's saved tensors (none recomputed)
  double layers = 0;     // all L layers' (full recomputation: each block's kept output)
  double once = 0;       // ids, embedding, final norm, head, loss, backward's gradient buffers
  double workspace = 0;  // scratch shared by the layers (+ what recomputation rebuilds)
  double ring = 0;       // context parallel: every layer's ring attention scratch
  double total() const { return layers + once + workspace + ring; }
};
GptFp32Activations dtsim_gpt_activations(const GptShape& g, const ActivationInput& in);

// Bytes one micro-batch saves through all of a model's layers on one tp (and cp) rank.
// gpt, 16-bit: L layers plus the embedding's dropout mask, / cp; gpt, fp32:
// dtsim_gpt_activations(...).total(); mlp/moe: dtsim_measured_activations at in.tp, bf16 as
// in.precision says.
double micro_batch_activations(const Architecture& a, const ActivationInput& in);

// mlp and moe: the activation bytes `dtsim train` measures on one rank that runs the whole
// model (single, ddp, zero: b samples per micro-batch, one micro-batch held at a time; mlp
// also tp and dp-tp, each block's hidden width split over `tp` ranks), including the
// stack's reusable workspaces and, for bf16, the fp32 working copy of a layer's weights
// and gradients. MoE assumes no token is dropped at capacity (an upper bound when some are).
double dtsim_measured_activations(const Architecture& a, int micro_batch, bool bf16, int tp = 1);

}  // namespace dtsim::train::estimator
