#include "model/moe.h"

#include <algorithm>
#include <cmath>

#include "model/check.h"
#include "model/kernels.h"

namespace dtsim::model {

size_t moe_router_size(const MoeConfig& c) { return size_t(c.num_experts) * c.d_model; }

size_t moe_expert_size(const MoeConfig& c) {
  return 2 * size_t(c.d_ff) * c.d_model + c.d_ff + c.d_model;
}

size_t moe_layer_size(const MoeConfig& c) {
  return moe_router_size(c) + c.num_experts * moe_expert_size(c);
}

ExpertWeights expert_weights(std::span<const float> block, const MoeConfig& c) {
  DTSIM_CHECK(block.size() == moe_expert_size(c));
  const size_t fd = size_t(c.d_ff) * c.d_model;
  return {block.subspan(0, fd), block.subspan(fd, c.d_ff), block.subspan(fd + c.d_ff, fd),
          block.subspan(2 * fd + c.d_ff, c.d_model)};
}

ExpertGrads expert_grads(std::span<float> block, const MoeConfig& c) {
  DTSIM_CHECK(block.size() == moe_expert_size(c));
  const size_t fd = size_t(c.d_ff) * c.d_model;
  return {block.subspan(0, fd), block.subspan(fd, c.d_ff), block.subspan(fd + c.d_ff, fd),
          block.subspan(2 * fd + c.d_ff, c.d_model)};
}

Routing router_forward(std::span<const float> h, std::span<const float> wr, int tokens,
                       const MoeConfig& c) {
  const int T = tokens, E = c.num_experts, K = c.top_k, D = c.d_model;
  DTSIM_CHECK(K >= 1 && K <= E && T >= 0);
  Routing r;
  r.tokens = T;
  r.num_experts = E;
  r.top_k = K;
  r.capacity = c.capacity_factor > 0
                   ? static_cast<int>(std::ceil(c.capacity_factor * T * K / double(E)))
                   : T;
  std::vector<float> logits(size_t(T) * E);  // (T, E)
  r.probs.resize(size_t(T) * E);
  linear_forward(h, wr, {}, logits, T, D, E);
  softmax_forward(logits, r.probs, T, E);

  r.expert.assign(size_t(T) * K, -1);
  r.gate.assign(size_t(T) * K, 0.0f);
  r.row.assign(size_t(T) * K, -1);
  r.routed.assign(E, 0);
  r.counts.assign(E, 0);
  for (int t = 0; t < T; ++t) {
    const float* p = &r.probs[size_t(t) * E];
    for (int j = 0; j < K; ++j) {
      int best = -1;
      for (int e = 0; e < E; ++e) {
        bool taken = false;
        for (int i = 0; i < j; ++i) taken |= r.expert[size_t(t) * K + i] == e;
        if (!taken && (best < 0 || p[e] > p[best])) best = e;
      }
      r.expert[size_t(t) * K + j] = best;
      r.gate[size_t(t) * K + j] = p[best];
      ++r.routed[best];
    }
  }
  // Capacity, slot-major: first choices claim places before any second choice.
  std::vector<int> position(size_t(T) * K, -1);
  for (int j = 0; j < K; ++j) {
    for (int t = 0; t < T; ++t) {
      const int e = r.expert[size_t(t) * K + j];
      if (r.counts[e] < r.capacity) position[size_t(t) * K + j] = r.counts[e]++;
    }
  }
  r.offsets.assign(E + 1, 0);
  for (int e = 0; e < E; ++e) r.offsets[e + 1] = r.offsets[e] + r.counts[e];
  r.token_of_row.assign(r.rows(), -1);
  for (int t = 0; t < T; ++t) {
    for (int j = 0; j < K; ++j) {
      const size_t s = size_t(t) * K + j;
      if (position[s] < 0) continue;
      r.row[s] = r.offsets[r.expert[s]] + position[s];
      r.token_of_row[r.row[s]] = t;
    }
  }
  return r;
}

void gate_backward(const Routing& r, std::span<const float> d_gate, std::span<float> d_probs) {
  const int K = r.top_k, E = r.num_experts;
  for (int t = 0; t < r.tokens; ++t) {
    for (int j = 0; j < K; ++j) {
      const size_t s = size_t(t) * K + j;
      d_probs[size_t(t) * E + r.expert[s]] += d_gate[s];
    }
  }
}

void router_backward(std::span<const float> h, std::span<const float> wr, const Routing& r,
                     std::span<const float> d_probs, std::span<float> dwr, std::span<float> dh,
                     int d_model) {
  std::vector<float> d_logits(size_t(r.tokens) * r.num_experts);  // (T, E)
  router_backward_input(h, wr, r, d_probs, d_logits, dh, d_model);
  router_backward_weight(h, r, d_logits, dwr, d_model);
}

void router_backward_input(std::span<const float> h, std::span<const float> wr, const Routing& r,
                           std::span<const float> d_probs, std::span<float> d_logits,
                           std::span<float> dh, int d_model) {
  const int T = r.tokens, E = r.num_experts;
  std::fill(d_logits.begin(), d_logits.begin() + size_t(T) * E, 0.0f);
  softmax_backward(r.probs, d_probs, d_logits, T, E);
  linear_backward(d_logits, h, wr, dh, {}, {}, T, d_model, E);
}

void router_backward_weight(std::span<const float> h, const Routing& r,
                            std::span<const float> d_logits, std::span<float> dwr, int d_model) {
  linear_backward(d_logits, h, {}, {}, dwr, {}, r.tokens, d_model, r.num_experts);
}

float aux_loss_forward(const Routing& r, float alpha) {
  const int T = r.tokens, E = r.num_experts;
  if (T == 0) return 0.0f;
  double sum = 0.0;
  for (int e = 0; e < E; ++e) {
    const double f = double(r.routed[e]) / (double(T) * r.top_k);
    double p = 0.0;
    for (int t = 0; t < T; ++t) p += r.probs[size_t(t) * E + e];
    sum += f * (p / T);
  }
  return static_cast<float>(alpha * E * sum);
}

void aux_loss_backward(const Routing& r, float alpha, float scale, std::span<float> d_probs) {
  const int T = r.tokens, E = r.num_experts;
  if (T == 0) return;
  std::vector<float> coef(E);  // (E) d aux / d probs[t, e], the same for every token
  for (int e = 0; e < E; ++e) {
    const double f = double(r.routed[e]) / (double(T) * r.top_k);
    coef[e] = static_cast<float>(scale * alpha * E * f / T);
  }
  for (int t = 0; t < T; ++t) {
    for (int e = 0; e < E; ++e) d_probs[size_t(t) * E + e] += coef[e];
  }
}

void dispatch_forward(std::span<const float> h, const Routing& r, int d_model,
                      std::span<float> grouped) {
  DTSIM_CHECK(grouped.size() >= size_t(r.rows()) * d_model);
  for (int row = 0; row < r.rows(); ++row) {
    const float* src = h.data() + size_t(r.token_of_row[row]) * d_model;
    std::copy(src, src + d_model, grouped.data() + size_t(row) * d_model);
  }
}

void dispatch_backward(std::span<const float> d_grouped, const Routing& r, int d_model,
                       std::span<float> dh) {
  // Token order, then slot order, so each token's sum has a fixed order.
  for (int t = 0; t < r.tokens; ++t) {
    float* dst = dh.data() + size_t(t) * d_model;
    for (int j = 0; j < r.top_k; ++j) {
      const int row = r.row[size_t(t) * r.top_k + j];
      if (row < 0) continue;
      const float* src = d_grouped.data() + size_t(row) * d_model;
      for (int d = 0; d < d_model; ++d) dst[d] += src[d];
    }
  }
}

void expert_forward(const ExpertWeights& w, std::span<const float> x, int n, const MoeConfig& c,
                    ExpertActivations& act, std::span<float> y) {
  const int D = c.d_model, F = c.d_ff;
  act.pre.resize(size_t(n) * F);
  act.hid.resize(size_t(n) * F);
  if (n == 0) return;
  linear_forward(x, w.w1, w.b1, act.pre, n, D, F);
  gelu_forward(act.pre, act.hid);
  linear_forward(act.hid, w.w2, w.b2, y, n, F, D);
}

void expert_backward(const ExpertWeights& w, std::span<const float> x, const ExpertActivations& act,
                     std::span<const float> dy, int n, const MoeConfig& c, const ExpertGrads& g,
                     std::span<float> dx) {
  if (n == 0) return;
  std::vector<float> d_hid(size_t(n) * c.d_ff), d_pre(size_t(n) * c.d_ff);  // (n, F) each
  expert_backward_input(w, x, act, dy, n, c, d_hid, d_pre, dx);
  expert_backward_weight(x, act, dy, d_pre, n, c, g);
}

// The kernel calls of the fused backward, each with its gradient outputs split off: each
// output is computed by the same call on the same inputs, so the split is bitwise.
void expert_backward_input(const ExpertWeights& w, std::span<const float> x,
                           const ExpertActivations& act, std::span<const float> dy, int n,
                           const MoeConfig& c, std::span<float> d_hid, std::span<float> d_pre,
                           std::span<float> dx) {
  const int D = c.d_model, F = c.d_ff;
  if (n == 0) return;
  const size_t nf = size_t(n) * F;
  std::fill(d_hid.begin(), d_hid.begin() + nf, 0.0f);
  std::fill(d_pre.begin(), d_pre.begin() + nf, 0.0f);
  linear_backward(dy, act.hid, w.w2, d_hid, {}, {}, n, F, D);
  gelu_backward(act.pre, d_hid.first(nf), d_pre.first(nf));
  if (!dx.empty()) linear_backward(d_pre, x, w.w1, dx, {}, {}, n, D, F);
}

void expert_backward_weight(std::span<const float> x, const ExpertActivations& act,
                            std::span<const float> dy, std::span<const float> d_pre, int n,
                            const MoeConfig& c, const ExpertGrads& g) {
  const int D = c.d_model, F = c.d_ff;
  if (n == 0) return;
  linear_backward(dy, act.hid, {}, {}, g.w2, g.b2, n, F, D);
  linear_backward(d_pre, x, {}, {}, g.w1, g.b1, n, D, F);
}

void combine_forward(std::span<const float> h, std::span<const float> expert_out, const Routing& r,
                     int d_model, std::span<float> y) {
  const size_t td = size_t(r.tokens) * d_model;
  DTSIM_CHECK(h.size() >= td && y.size() >= td);
  std::copy(h.begin(), h.begin() + td, y.begin());
  for (int t = 0; t < r.tokens; ++t) {
    float* dst = y.data() + size_t(t) * d_model;
    for (int j = 0; j < r.top_k; ++j) {
      const size_t s = size_t(t) * r.top_k + j;
      if (r.row[s] < 0) continue;
      const float g = r.gate[s];
      const float* src = expert_out.data() + size_t(r.row[s]) * d_model;
      for (int d = 0; d < d_model; ++d) dst[d] += g * src[d];
    }
  }
}

void combine_backward(std::span<const float> dy, std::span<const float> expert_out,
                      const Routing& r, int d_model, std::span<float> dh,
                      std::span<float> d_expert_out, std::span<float> d_gate) {
  for (int t = 0; t < r.tokens; ++t) {
    const float* g_y = dy.data() + size_t(t) * d_model;
    float* g_h = dh.data() + size_t(t) * d_model;
    for (int d = 0; d < d_model; ++d) g_h[d] += g_y[d];
    for (int j = 0; j < r.top_k; ++j) {
      const size_t s = size_t(t) * r.top_k + j;
      if (r.row[s] < 0) continue;
      const float* out = expert_out.data() + size_t(r.row[s]) * d_model;
      float* g_out = d_expert_out.data() + size_t(r.row[s]) * d_model;
      float dot = 0.0f;
      for (int d = 0; d < d_model; ++d) {
        g_out[d] += r.gate[s] * g_y[d];
        dot += g_y[d] * out[d];
      }
      d_gate[s] += dot;
    }
  }
}

}  // namespace dtsim::model
