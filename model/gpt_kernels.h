// The GPT's per-token kernels beside those of kernels.h: LayerNorm and the token + position
// embedding, forward and backward side by side, over flat row-major buffers. Conventions as
// kernels.h: forward kernels overwrite their outputs, backward kernels ACCUMULATE (+=) into
// every gradient output (an empty span skips it). Thread safety: pure functions without
// global state; any number of threads may call concurrently on disjoint outputs.
#pragma once

#include <span>

namespace dtsim::model {

// Per row of x (rows, dim): y = (x - mean) * rstd * (1 + g) + b, rstd = 1 / sqrt(var + eps)
// (biased variance). The gain is stored as g = gamma - 1, so that dtsim's seeded uniform
// initial values (init_params) start every norm near the identity; mean and rstd (rows) are
// written for backward.
inline constexpr float kLayerNormEps = 1e-5f;
void layernorm_forward(std::span<const float> x, std::span<const float> g, std::span<const float> b,
                       std::span<float> y, std::span<float> mean, std::span<float> rstd, int rows,
                       int dim);
// Given dy (rows, dim), x and forward's mean and rstd: dx += dL/dx, dg += sum_rows dy * xhat,
// db += sum_rows dy, xhat = (x - mean) * rstd.
void layernorm_backward(std::span<const float> dy, std::span<const float> x,
                        std::span<const float> g, std::span<const float> mean,
                        std::span<const float> rstd, std::span<float> dx, std::span<float> dg,
                        std::span<float> db, int rows, int dim);

// y (B, S, D) = wte[id(b, t)] + wpe[t], ids (B, S) floats holding integer token ids in
// [0, vocab) (aborts otherwise); wte (vocab, D), wpe (S, D).
void embedding_forward(std::span<const float> ids, std::span<const float> wte,
                       std::span<const float> wpe, std::span<float> y, int batch, int seq, int dim,
                       int vocab);
// dwte[id(b, t)] += dy (b, t), dwpe[t] += dy (b, t).
void embedding_backward(std::span<const float> ids, std::span<const float> dy,
                        std::span<float> dwte, std::span<float> dwpe, int batch, int seq, int dim);

}  // namespace dtsim::model
