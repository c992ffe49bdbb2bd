// Activation memory from the architecture.
//
// GPT: Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
// Models" (arXiv 2205.05198), section 4: the bytes one layer saves for backward per
// micro-batch of b sequences of s tokens, 16-bit activations, 1-byte dropout masks:
//
//   no parallelism              s b h (34 + 5 a s / h)
//   tensor parallel t           s b h (10 + 24 / t + 5 a s / (h t))
//   + sequence parallel         s b h / t (34 + 5 a s / h)
//   + selective recomputation   the 5 a s / h term (softmax, its dropout) is recomputed: 0
//   full recomputation          2 s b h (the layer's input; / t with sequence parallelism)
//
// computed here from the per-tensor terms (so grouped-query attention, a SwiGLU MLP of width
// f and no dropout, Llama's shape, count what they save; GPT-3's shape gives the paper's
// 34 and 5 a s / h exactly).
//
// mlp and moe: the buffers dtsim's own layers allocate (model/layer_stack.cc, mlp_layers.h,
// moe_layer.cc), which `dtsim train --report` measures as the activations category.
#pragma once

#include "train/estimate/architecture.h"

namespace dtsim::train::estimator {

enum class Recompute { kNone, kSelective, kFull };

struct ActivationInput {
  int tp = 1;
  bool sequence_parallel = false;
  Recompute recompute = Recompute::kNone;
  int micro_batch = 1;  // b: sequences (gpt) or samples (mlp, moe) per micro-batch
  bool dropout = true;  // gpt: dropout masks (Korthikanti et al. assume dropout)
};

// The activations one micro-batch saves through one layer on one tensor-parallel rank.
struct LayerActivations {
  double tp_sharded = 0;  // bytes divided by t (attention and MLP internals)
  double replicated = 0;  // bytes every tp rank keeps (norm inputs, layer inputs, masks);
                          // divided by t under sequence parallelism
  double scores = 0;      // softmax output, its mask and dropout output (0 when recomputed)
  double total() const { return tp_sharded + replicated + scores; }
};

// gpt only: one transformer layer.
LayerActivations gpt_layer_activations(const GptShape& g, const ActivationInput& in);

// Bytes one micro-batch saves through all of a model's layers on one tp rank (gpt: L layers
// plus the embedding's dropout mask; mlp/moe: dtsim's layer buffers per micro-batch).
double micro_batch_activations(const Architecture& a, const ActivationInput& in);

// mlp and moe: the activation bytes `dtsim train` measures on one rank that runs the whole
// model (single, ddp, zero: b samples per micro-batch, one micro-batch held at a time; mlp
// also tp and dp-tp, each block's hidden width split over `tp` ranks), including the
// stack's reusable workspaces and, for bf16, the fp32 working copy of a layer's weights
// and gradients. MoE assumes no token is dropped at capacity (an upper bound when some are).
double dtsim_measured_activations(const Architecture& a, int micro_batch, bool bf16, int tp = 1);

// gpt: the activation bytes `dtsim train --model gpt` measures on one tensor-parallel rank
// holding every layer (its own fp32 count, model/gpt_memory.h, with heads of h / a), for
// sequence parallelism and recomputation as `in` asks. No context parallelism (that count
// has none).
double dtsim_measured_gpt_activations(const GptShape& g, const ActivationInput& in);

}  // namespace dtsim::train::estimator
