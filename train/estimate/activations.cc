#include "train/estimate/activations.h"

#include <algorithm>

namespace dtsim::train::estimator {

LayerActivations gpt_layer_activations(const GptShape& g, const ActivationInput& in) {
  const double sb = double(g.seq) * in.micro_batch, h = g.hidden, t = in.tp;
  const double kvd = double(g.kv()) * g.hidden / g.heads, f = g.ffn_width();
  const double mask = in.dropout ? 1 : 0;  // bytes per element of a dropout mask
  LayerActivations l;
  if (in.recompute == Recompute::kFull) {  // only the layer's input, 2 bytes per element
    l.replicated = 2 * sb * h / (in.sequence_parallel ? t : 1);
    return l;
  }
  // Inside attention: Q, K, V (the scores' and the weighting's inputs) and the output
  // projection's input; inside the MLP: the activation's input and output (gated: gate, up
  // and their product), 2 bytes each. The paper's 24 with f = 4h and kv = h.
  const double mlp_inside = g.llama ? 3 * 2 * f : 2 * 2 * f;
  l.tp_sharded = sb * (2 * h + 2 * 2 * kvd + 2 * h + mlp_inside) / t;
  // Two norm inputs, the QKV and MLP inputs (2 bytes each) and the two dropout masks after
  // the output projection and the MLP: the paper's 10.
  l.replicated = sb * (4 * h + 2 * h + 2 * h + 2 * mask * h);
  if (in.sequence_parallel) l.replicated /= t;
  // Softmax output (2), its dropout mask (1) and dropout output (2) per score: 5 a s / h.
  if (in.recompute == Recompute::kNone) {
    l.scores = sb * g.heads * double(g.seq) * (2 + 3 * mask) / t;
  }
  return l;
}

namespace {

double mlp_floats(const model::MlpConfig& m, double b, bool bf16, int tp) {
  const double d = m.input_dim, hid = double(m.hidden_dim) / tp, o = m.output_dim;
  const double L = m.num_blocks;
  double n = b * (L * d + o);  // every layer's output
  n += b * d;                  // the stack's copy of the input
  n += L * 2 * b * hid;        // each block's GELU derivative and output
  n += b * hid;                // backward's pre-activation gradient (workspace slot 0)
  n += b * o + b * d;          // the loss gradient and the head's input gradient
  if (tp > 1) n += b * d;      // a tp block's partial input gradient before its all-reduce
  if (bf16) n += 2 * std::max(2 * hid * d + hid + d, o * d + o);  // fp32 working copies
  return n;
}

double moe_floats(const model::MoeModelConfig& m, double b, bool bf16) {
  const model::MoeConfig& e = m.moe;
  const double d = e.d_model, f = e.d_ff, c = m.num_classes, L = m.num_blocks;
  const double rows = b * e.top_k;  // dispatched token slots when none is dropped
  double n = b * (d + L * d + c);   // every layer's output
  n += b * m.input_dim;             // the stack's copy of the input
  // Per MoE layer: dispatched inputs and expert outputs (rows, D), each expert's
  // pre-activation and GELU output (rows, F), the router's probabilities (b, E).
  n += L * (rows * (2 * d + 2 * f) + b * e.num_experts);
  n += 2 * b * c;                 // softmax probabilities and the loss gradient
  n += b * d * (L >= 1 ? 2 : 1);  // input gradients, two alternating buffers
  if (bf16) {
    const double moe_layer = e.num_experts * d + e.num_experts * (2 * f * d + f + d);
    n += 2 * std::max({moe_layer, d * m.input_dim + d, c * d + c});
  }
  return n;
}

}  // namespace

double dtsim_measured_activations(const Architecture& a, int micro_batch, bool bf16, int tp) {
  const double b = micro_batch;
  const double floats =
      a.kind == ArchKind::kMlp ? mlp_floats(a.mlp, b, bf16, tp) : moe_floats(a.moe, b, bf16);
  return floats * sizeof(float);
}

GptFp32Activations dtsim_gpt_activations(const GptShape& g, const ActivationInput& in) {
  const double t = in.tp, h = g.hidden, a = g.heads, hs = h / a, V = g.vocab;
  const double kvd = g.kv() * hs, f = g.ffn_width();
  const double s = double(g.seq) / in.cp;  // a sequence's tokens on this cp rank
  const bool sp = in.sequence_parallel && in.tp > 1;
  const double n = in.micro_batch * s;  // token rows inside the blocks
  const double nl = sp ? n / t : n;     // token rows between them (sequence parallel: / t)
  const bool full = in.recompute == Recompute::kFull;
  const bool selective = in.recompute == Recompute::kSelective;
  const double mask = in.dropout ? 0.25 : 0;  // a 1-byte dropout mask, in floats
  const double stats = g.llama ? 1 : 2;       // LayerNorm's mean and rstd; RMSNorm's rstd
  const double qkv = (h + 2 * kvd) / t, e = h / t, heads = a / t, ff = f / t;
  const double act = g.llama ? 3 : 2;  // GELU: gelu(pre) and gelu'(pre); SwiGLU: gate, up, both

  // One layer, Korthikanti et al.'s tensors in floats a token row, as dtsim's blocks save them:
  //   the two norms' inputs (each block's input: the previous block's output)  2 h    on nl
  //   the QKV and fc1 inputs (the norms' outputs; kept gathered under sp)      2 h    on n
  //   Q, K, V                                                                  qkv    on n
  //   softmax, its mask and output (5 a s / h): the kernel keeps each row's
  //     log-sum-exp per head instead (no s x s matrix)                         a/t    on n
  //   the attention output (the output projection's input; selective: redone) h/t    on n
  //   the GELU's input and output: gelu(pre) and gelu'(pre) (selective: pre)   2 f/t  on n
  //   dropout masks, 1 byte (dtsim has none): after the output projection
  //     and the MLP                                                            2 h    on nl
  //     and on the attention probabilities (not under selective)               a seq/t on n
  // plus what the paper leaves out: the two norms' statistics (mean, rstd)     2 x 2  on nl
  const double attn_state = n * h + stats * nl + n * (qkv + heads + e);
  const double mlp_state = n * h + stats * nl + act * n * ff;
  const double redone = selective ? n * (e + ff) : 0;
  const double masks = mask * (2 * h * nl + (selective ? 0 : n * heads * g.seq));
  const double outputs = 2 * h * nl;  // the attention and MLP blocks' outputs
  GptFp32Activations r;
  // Full recomputation keeps each block's output (attention and MLP are separate layers of
  // the stack: two a transformer layer, where the paper keeps one layer input).
  r.layer = full ? outputs : outputs + attn_state + mlp_state - redone + masks;
  r.layers = g.layers * r.layer;

  // Once a rank: the token ids (whole sequences: every cp rank gets all s), the embedding's
  // output (and its dropout mask), the final norm's output and, unless recomputed, its
  // statistics (on all rows) and gathered input (sp), the logits, the loss's probabilities
  // and gradient, and backward's two alternating input-gradient buffers (the head's, the
  // final norm's).
  const double final_norm = stats * n + (sp ? n * h : 0);
  r.once = in.micro_batch * double(g.seq) + nl * h * (1 + mask) + n * h + (full ? 0 : final_norm) +
           3 * n * V + n * h + nl * h;

  // Scratch shared by every layer, each slot as large as its largest use: the core's output
  // gradient (attention n h/t, MLP n f/t, sp: the embedding's summed gradients (V + s) h),
  // dQKV or the MLP's norm-output gradient, attention's norm-output gradient, one row set's
  // softmax delta (s); sequence parallel: the gathered dy or partial output, the sequence
  // permutation (n h each), this rank's normalised rows (nl h) and the norm gradients (2 h).
  r.workspace =
      std::max({n * e, n * ff, sp ? (V + g.seq) * h : 0}) + std::max(n * qkv, n * h) + n * h + s;
  if (sp) r.workspace += 2 * n * h + nl * h + 2 * h;
  // Full recomputation: the redone forward's discarded output (logits or a block's) and the
  // largest state rebuilt for one layer's backward; selective: the larger rebuilt tensor.
  if (full) r.workspace += std::max(n * V, n * h) + std::max({attn_state, mlp_state, final_norm});
  if (selective) r.workspace += std::max(n * e, n * ff);

  // Context parallel, each layer's ring attention scratch, whatever is recomputed: K and V
  // held and incoming, dK and dV travelling and incoming (4 x 2 kv d / t), the softmax delta
  // (a / t) on n, and one (query chunk, key chunk) block's output and LSE of c rows.
  const double chunk = double(g.seq) / (2 * in.cp);  // c: a sequence cut in 2 cp chunks
  if (in.cp > 1) r.ring = g.layers * (n * (8 * kvd / t + heads) + chunk * (hs + 1));

  constexpr double kFloat = sizeof(float);
  r.layer *= kFloat, r.layers *= kFloat, r.once *= kFloat, r.workspace *= kFloat, r.ring *= kFloat;
  return r;
}

double micro_batch_activations(const Architecture& a, const ActivationInput& in) {
  const bool bf16 = in.precision == model::Precision::kMixedBf16;
  if (a.kind != ArchKind::kGpt) return dtsim_measured_activations(a, in.micro_batch, bf16, in.tp);
  const GptShape& g = a.gpt;
  if (!bf16) return dtsim_gpt_activations(g, in).total();
  const double layer = gpt_layer_activations(g, in).total();
  // The embedding's dropout mask (Korthikanti et al. section 4.3), 1 byte per element.
  const double embed =
      in.dropout ? double(g.seq) * in.micro_batch * g.hidden / (in.sequence_parallel ? in.tp : 1)
                 : 0;
  return (g.layers * layer + embed) / in.cp;  // a cp rank holds s / cp tokens of each
}

}  // namespace dtsim::train::estimator
