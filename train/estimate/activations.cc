#include "train/estimate/activations.h"

#include <algorithm>

#include "model/gpt_memory.h"

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

double dtsim_measured_gpt_activations(const GptShape& g, const ActivationInput& in) {
  const model::GptConfig c{.vocab = g.vocab,
                           .seq_len = g.seq,
                           .d_model = g.hidden,
                           .heads = g.heads,
                           .head_dim = g.hidden / g.heads,
                           .num_layers = g.layers,
                           .mlp_hidden = g.ffn_width()};
  const model::Recompute r = in.recompute == Recompute::kFull        ? model::Recompute::kFull
                             : in.recompute == Recompute::kSelective ? model::Recompute::kSelective
                                                                     : model::Recompute::kNone;
  return static_cast<double>(sizeof(float)) *
         static_cast<double>(
             model::gpt_activation_floats(c, {.batch = in.micro_batch,
                                              .tp = in.tp,
                                              .sequence_parallel = in.sequence_parallel,
                                              .recompute = r})
                 .total());
}

double micro_batch_activations(const Architecture& a, const ActivationInput& in) {
  if (a.kind != ArchKind::kGpt) {
    return dtsim_measured_activations(a, in.micro_batch, false, in.tp);
  }
  const GptShape& g = a.gpt;
  const double layer = gpt_layer_activations(g, in).total();
  // The embedding's dropout mask (Korthikanti et al. section 4.3), 1 byte per element.
  const double embed =
      in.dropout ? double(g.seq) * in.micro_batch * g.hidden / (in.sequence_parallel ? in.tp : 1)
                 : 0;
  return g.layers * layer + embed;
}

}  // namespace dtsim::train::estimator
