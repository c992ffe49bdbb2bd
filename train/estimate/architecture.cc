#include "train/estimate/architecture.h"

namespace dtsim::train::estimator {

ParamCounts count_params(const Architecture& a) {
  ParamCounts p;
  if (a.kind == ArchKind::kMlp) {
    const double d = a.mlp.input_dim, hid = a.mlp.hidden_dim, o = a.mlp.output_dim;
    p.layers = a.mlp.num_blocks;
    p.per_layer = 2 * hid * d + hid + d;
    p.mlp = p.layers * p.per_layer;
    p.output = o * d + o;
    return p;
  }
  if (a.kind == ArchKind::kMoe) {
    const model::MoeConfig& m = a.moe.moe;
    const double d = m.d_model, f = m.d_ff, e = m.num_experts;
    p.layers = a.moe.num_blocks;
    p.embedding = d * a.moe.input_dim + d;
    p.router = p.layers * e * d;
    p.mlp = p.layers * e * (2 * f * d + f + d);
    p.per_layer = e * d + e * (2 * f * d + f + d);
    p.output = double(a.moe.num_classes) * d + a.moe.num_classes;
    return p;
  }
  const GptShape& g = a.gpt;
  const double h = g.hidden, kvd = double(g.kv()) * g.hidden / g.heads, f = g.ffn_width();
  const bool bias = !g.llama;
  const double attention = 2 * h * h + 2 * h * kvd + (bias ? 2 * h + 2 * kvd : 0);
  const double mlp = (g.llama ? 3 : 2) * h * f + (bias ? f + h : 0);
  const double norm = g.llama ? h : 2 * h;  // RMSNorm: a scale; LayerNorm: scale and shift
  p.layers = g.layers;
  p.per_layer = attention + mlp + 2 * norm;
  p.attention = g.layers * attention;
  p.mlp = g.layers * mlp;
  p.norms = g.layers * 2 * norm + norm;
  p.embedding = double(g.vocab) * h + (g.llama ? 0 : double(g.seq) * h);
  p.output = g.llama ? double(g.vocab) * h : 0;
  return p;
}

Flops forward_flops(const Architecture& a, double tokens) {
  Flops fl;
  if (a.kind == ArchKind::kMlp) {
    const double d = a.mlp.input_dim, hid = a.mlp.hidden_dim;
    fl.layers = a.mlp.num_blocks * 2 * tokens * 2 * hid * d;
    fl.logits = 2 * tokens * d * a.mlp.output_dim;
    return fl;
  }
  if (a.kind == ArchKind::kMoe) {
    const model::MoeConfig& m = a.moe.moe;
    const double d = m.d_model;
    fl.layers = a.moe.num_blocks * 2 * tokens * (m.num_experts * d + m.top_k * 2.0 * m.d_ff * d);
    fl.logits = 2 * tokens * d * (a.moe.input_dim + a.moe.num_classes);
    return fl;
  }
  const GptShape& g = a.gpt;
  const double h = g.hidden, kvd = double(g.kv()) * g.hidden / g.heads;
  const double matmul = 2 * h * h + 2 * h * kvd + (g.llama ? 3 : 2) * h * g.ffn_width();
  fl.attention_scores = g.layers * tokens * 4.0 * g.seq * h;
  fl.layers = g.layers * 2 * tokens * matmul + fl.attention_scores;
  fl.logits = 2 * tokens * h * g.vocab;
  return fl;
}

const std::vector<Preset>& presets() {
  static const std::vector<Preset> kPresets = {
      {"llama-7b",
       "Touvron et al. 2023, LLaMA (arXiv 2302.13971) Table 2: 32 layers, dim 4096, 32 heads, "
       "context 2048, batch 4M tokens; FFN 11008 and vocabulary 32000 from the released "
       "params.json",
       {.layers = 32,
        .hidden = 4096,
        .heads = 32,
        .ffn = 11008,
        .vocab = 32000,
        .seq = 2048,
        .llama = true},
       2048},
      {"llama-70b",
       "Touvron et al. 2023, Llama 2 (arXiv 2307.09288) section 2.2 and Table 1: 80 layers, dim "
       "8192, 64 heads, grouped-query attention with 8 key/value heads, context 4096, batch 4M "
       "tokens; FFN 28672 "
       "and vocabulary 32000 from the released config",
       {.layers = 80,
        .hidden = 8192,
        .heads = 64,
        .kv_heads = 8,
        .ffn = 28672,
        .vocab = 32000,
        .seq = 4096,
        .llama = true},
       1024},
      {"gpt3-175b",
       "Brown et al. 2020, GPT-3 (arXiv 2005.14165) Table 2.1: 96 layers, d_model 12288, 96 "
       "heads, context 2048, batch 3.2M tokens (1536 sequences); vocabulary 50257 (GPT-2's BPE)",
       {.layers = 96, .hidden = 12288, .heads = 96, .vocab = 50257, .seq = 2048},
       1536},
  };
  return kPresets;
}

const Preset* find_preset(const std::string& name) {
  for (const Preset& p : presets()) {
    if (name == p.name) return &p;
  }
  return nullptr;
}

}  // namespace dtsim::train::estimator
