#include "model/gpt_regions.h"

#include <algorithm>

#include "model/check.h"
#include "model/gpt_kernels.h"
#include "model/mlp_layers.h"

namespace dtsim::model {
namespace {

bool sharded(const SequenceSharding& sh) { return static_cast<bool>(sh.reduce); }

// Copies between (B, S, D) and rank-major (T, B, S/T, D): to_rank_major or back.
void permute(const TokenRows& t, int ranks, const float* from, float* to, bool to_rank_major) {
  const size_t run = size_t(t.seq_local) * t.dim;  // one rank's tokens of one sample
  for (int r = 0; r < ranks; ++r) {
    for (int b = 0; b < t.batch; ++b) {
      const size_t full = (size_t(b) * t.seq + size_t(r) * t.seq_local) * t.dim;
      const size_t major = (size_t(r) * t.batch + b) * run;
      if (to_rank_major) {
        std::copy_n(from + full, run, to + major);
      } else {
        std::copy_n(from + major, run, to + full);
      }
    }
  }
}

}  // namespace

void gather_sequence(const SequenceSharding& sh, std::span<const float> local,
                     std::span<float> full, const TokenRows& t, std::span<float> scratch) {
  const size_t n = size_t(t.rows()) * t.dim;
  DTSIM_CHECK(sh.sequence_parallel() && t.seq == t.seq_local * sh.size && scratch.size() >= n);
  sh.all_gather(local.first(size_t(t.rows_local()) * t.dim), scratch.first(n));
  permute(t, sh.size, scratch.data(), full.data(), false);
}

void reduce_scatter_sequence(const SequenceSharding& sh, std::span<const float> full,
                             std::span<float> local, const TokenRows& t, std::span<float> scratch) {
  const size_t n = size_t(t.rows()) * t.dim;
  DTSIM_CHECK(sh.sequence_parallel() && t.seq == t.seq_local * sh.size && scratch.size() >= n);
  permute(t, sh.size, full.data(), scratch.data(), true);
  sh.reduce_scatter(scratch.first(n), local.first(size_t(t.rows_local()) * t.dim));
}

void slice_sequence(const SequenceSharding& sh, std::span<const float> full, std::span<float> local,
                    const TokenRows& t) {
  const size_t run = size_t(t.seq_local) * t.dim;
  for (int b = 0; b < t.batch; ++b) {
    std::copy_n(full.data() + (size_t(b) * t.seq + size_t(sh.rank) * t.seq_local) * t.dim, run,
                local.data() + size_t(b) * run);
  }
}

void prenorm_forward(const SequenceSharding& sh, std::span<const float> g, std::span<const float> b,
                     std::span<const float> x, const TokenRows& t, NormState& s, Workspace& ws) {
  const int D = t.dim, local = t.rows_local();
  ensure_size(s.xn, s.ledger, size_t(t.rows()) * D);
  ensure_size(s.mean, s.ledger, local);
  ensure_size(s.rstd, s.ledger, local);
  if (!sh.sequence_parallel()) {
    layernorm_forward(x, g, b, s.xn.span(), s.mean.span(), s.rstd.span(), local, D);
    return;
  }
  std::span<float> mine = ws.take(6, size_t(local) * D);
  layernorm_forward(x, g, b, mine, s.mean.span(), s.rstd.span(), local, D);
  gather_sequence(sh, mine, s.xn.span(), t, ws.take(5, size_t(t.rows()) * D));
}

void prenorm_backward(const SequenceSharding& sh, std::span<float> dxn, std::span<const float> x,
                      std::span<const float> dy, std::span<const float> g, const NormState& s,
                      const TokenRows& t, std::span<float> dx, std::span<float> gg,
                      std::span<float> gb, Workspace& ws) {
  const int D = t.dim, local = t.rows_local();
  const size_t n = size_t(local) * D;
  std::span<float> dxn_mine = dxn;
  if (sh.sequence_parallel()) {
    dxn_mine = ws.take(6, n);
    reduce_scatter_sequence(sh, dxn, dxn_mine, t, ws.take(5, size_t(t.rows()) * D));
  } else if (sharded(sh)) {
    sh.reduce(dxn.first(n));  // f's backward: the partial input gradients summed
  }
  // The residual makes dy the first term of dx; the norm's part accumulates on top (an
  // empty dx: the gains' gradients only).
  if (!dx.empty()) std::copy_n(dy.begin(), n, dx.begin());
  if (!sh.sequence_parallel()) {
    layernorm_backward(dxn_mine, x, g, s.mean.span(), s.rstd.span(), dx, gg, gb, local, D);
    return;
  }
  // This rank's tokens give a part of the gains' gradients: summed over the ranks (Megatron's
  // all-reduce of the sequence-parallel norms' gradients), then added.
  std::span<float> part = ws.take(7, 2 * size_t(D));
  std::fill(part.begin(), part.end(), 0.0f);
  layernorm_backward(dxn_mine, x, g, s.mean.span(), s.rstd.span(), dx, part.first(D),
                     part.subspan(D, D), local, D);
  sh.reduce(part);
  for (int d = 0; d < D; ++d) {
    gg[d] += part[d];
    gb[d] += part[D + d];
  }
}

std::span<float> core_output(const SequenceSharding& sh, std::span<float> y, const TokenRows& t,
                             Workspace& ws) {
  if (!sh.sequence_parallel()) return y.first(size_t(t.rows()) * t.dim);
  return ws.take(4, size_t(t.rows()) * t.dim);
}

void block_output(const SequenceSharding& sh, std::span<float> core, std::span<const float> bias,
                  std::span<const float> x, const TokenRows& t, std::span<float> y, Workspace& ws) {
  const int D = t.dim, local = t.rows_local();
  if (!sharded(sh)) {  // the plain block: core is y and holds the bias
    for (size_t i = 0; i < size_t(local) * D; ++i) y[i] += x[i];
    return;
  }
  if (sh.sequence_parallel()) {
    reduce_scatter_sequence(sh, core, y, t, ws.take(5, size_t(t.rows()) * D));
  } else {
    sh.reduce(core);  // g: the partial outputs summed, in y
  }
  for (int r = 0; r < local; ++r) {
    float* row = y.data() + size_t(r) * D;
    const float* in = x.data() + size_t(r) * D;
    for (int d = 0; d < D; ++d) row[d] = row[d] + bias[d] + in[d];  // the bias once, then x
  }
}

std::span<const float> full_output_grad(const SequenceSharding& sh, std::span<const float> dy,
                                        const TokenRows& t, Workspace& ws) {
  if (!sh.sequence_parallel()) return dy.first(size_t(t.rows()) * t.dim);
  std::span<float> full = ws.take(4, size_t(t.rows()) * t.dim);
  gather_sequence(sh, dy, full, t, ws.take(5, size_t(t.rows()) * t.dim));
  return full;
}

}  // namespace dtsim::model
