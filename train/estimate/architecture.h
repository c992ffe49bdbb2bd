// A model described by its architecture alone: the shape of a GPT-style decoder (or of
// dtsim's MLP and MoE models), its parameter count by layer kind and its FLOPs per step, so
// the estimator needs no parameter count typed in. Named shapes (--preset) carry their source.
//
// A GPT layer is pre-norm attention then an MLP: q and o projections (h, h), k and v
// (h, kv d) with d = h / a (grouped-query attention when kv < a), an MLP of width f (two
// matrices, or three with a gated SwiGLU unit), two norms. Counts follow the released
// checkpoints: GPT-3 has biases, LayerNorm, learned positions and a tied output; Llama has
// none of the biases, RMSNorm, rotary positions and an untied output.
#pragma once

#include <string>
#include <vector>

#include "model/mlp.h"
#include "model/moe_model.h"

namespace dtsim::train::estimator {

enum class ArchKind { kGpt, kMlp, kMoe };

struct GptShape {
  int layers = 0;      // L
  int hidden = 0;      // h
  int heads = 0;       // a
  int kv_heads = 0;    // 0: a (multi-head attention)
  int ffn = 0;         // f; 0: 4h
  int vocab = 0;       // V
  int seq = 0;         // s
  bool llama = false;  // Llama conventions (see the file comment); false: GPT-3's
  int kv() const { return kv_heads > 0 ? kv_heads : heads; }
  int ffn_width() const { return ffn > 0 ? ffn : 4 * hidden; }
};

struct Architecture {
  ArchKind kind = ArchKind::kGpt;
  GptShape gpt;
  model::MlpConfig mlp;
  model::MoeModelConfig moe;
};

// Parameters by layer kind; total() is the model's Psi.
struct ParamCounts {
  double embedding = 0;  // token (and learned position) embeddings; mlp/moe: the input layer
  double attention = 0;  // all layers' q, k, v, o (and biases)
  double mlp = 0;        // all layers' dense MLPs (or MoE experts, all E of them)
  double router = 0;     // MoE routers
  double norms = 0;      // all norms, final one included
  double output = 0;     // untied output head (mlp/moe: the head)
  double total() const { return embedding + attention + mlp + router + norms + output; }
  // Parameters of one transformer layer (or block): what a pipeline stage holds L/p of.
  double per_layer = 0;
  int layers = 0;
};

ParamCounts count_params(const Architecture& a);

// FLOPs of one forward pass over `tokens` tokens (a micro-batch of b sequences: b s):
// 2 per multiply-add of every matrix, the attention scores and their weighting
// (4 s h per token per layer, no causal halving, as Narayanan et al. 2021 count), and the
// logits. mlp/moe: their GEMMs (an MoE token runs k experts).
struct Flops {
  double layers = 0;            // all transformer layers (or blocks)
  double logits = 0;            // output layer (mlp/moe: head and embedding)
  double attention_scores = 0;  // the part of `layers` that selective recompute repeats
  double total() const { return layers + logits; }
};
Flops forward_flops(const Architecture& a, double tokens);

// A named shape: what it is and where its numbers come from.
struct Preset {
  const char* name;
  const char* source;
  GptShape shape;
  int global_batch;  // sequences per step in the source's training run
};
const std::vector<Preset>& presets();
// The preset named `name`, or nullptr.
const Preset* find_preset(const std::string& name);

}  // namespace dtsim::train::estimator
