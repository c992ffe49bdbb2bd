#include "model/gpt_memory.h"

#include <algorithm>

namespace dtsim::model {

GptActivationFloats gpt_activation_floats(const GptConfig& c, const GptActivationShape& a) {
  const int64_t t = std::max(1, a.tp), cp = std::max(1, a.cp), S = c.seq_len / cp, D = c.d_model,
                F = c.mlp_hidden / t, E = int64_t(c.heads) * c.head_dim / t, H = c.heads / t,
                V = c.vocab;
  const bool sp = a.sequence_parallel && t > 1;
  const int64_t n = a.batch * S, nl = sp ? n / t : n;  // this rank's tokens (S: cp-local)
  const int64_t L = a.layers < 0 ? c.num_layers : a.layers;

  // Each layer's state: AttentionBlock's, GptMlpBlock's (selective: without the attention
  // output and gelu(pre)), and the final norm's.
  const bool selective = a.recompute == Recompute::kSelective;
  const int64_t attn = n * D + 2 * nl + n * ((selective ? 3 : 4) * E + H);
  const int64_t mlp = n * D + 2 * nl + (selective ? 1 : 2) * n * F;
  const int64_t lnf = 2 * n + (sp ? n * D : 0);
  const int64_t outputs = 2 * nl * D;

  GptActivationFloats out;
  out.per_layer = outputs + attn + mlp;
  const bool full = a.recompute == Recompute::kFull;
  out.layers = L * (full ? outputs : out.per_layer);
  // The input ids, the embedding's, final norm's and head's outputs, the loss's probabilities
  // and gradient, backward's two alternating gradient buffers (the head's dx, the norm's).
  out.rest =
      a.batch * c.seq_len + nl * D + n * D + n * V + 2 * n * V + n * D + nl * D + (full ? 0 : lnf);
  // Workspace slots 0-3 (and 4-7 under sequence parallelism), gpt_layers.h / gpt_regions.h.
  int64_t ws = std::max({n * E, n * F, sp ? (V + c.seq_len) * D : 0}) + std::max(3 * n * E, n * D) +
               n * D + S;
  if (sp) ws += 2 * n * D + nl * D + 2 * D;
  // Recomputation: the discarded output of the forward re-run and the largest state; or
  // the larger of the tensors a selective layer rebuilds for its backward.
  if (full) ws += std::max({n * V, n * D}) + std::max({attn, mlp, lnf});
  if (selective) ws += std::max(n * E, n * F);
  out.workspace = ws;
  // Ring attention (ring_attention.h): K/V and dK/dV, each held and incoming; delta; one
  // (query chunk, key chunk) block's output and LSE.
  const int64_t chunk = c.seq_len / (2 * cp);
  if (cp > 1) out.ring = L * (8 * n * E + n * H + chunk * (c.head_dim + 1));
  return out;
}

}  // namespace dtsim::model
