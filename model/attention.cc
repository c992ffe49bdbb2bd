#include "model/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "model/check.h"

namespace dtsim::model {
namespace {

constexpr int kBr = 32;  // query rows per tile
constexpr int kBc = 64;  // key/value rows per tile
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// t (head_dim, kBc) = the transpose of rows (n, head_dim) at stride ld; columns n.. are 0.
void transpose_tile(const float* rows, int ld, int n, int head_dim, float* t) {
  for (int d = 0; d < head_dim; ++d) {
    float* td = t + d * kBc;
    for (int c = 0; c < n; ++c) td[c] = rows[size_t(c) * ld + d];
    for (int c = n; c < kBc; ++c) td[c] = 0.0f;
  }
}

// s (nr, kBc) = scale * a (nr, head_dim; stride ld) * t (head_dim, kBc), four rows at a time
// so that each t row is loaded once per four output rows.
void tile_product(const float* a, int ld, int nr, const float* t, int head_dim, float scale,
                  float* s) {
  int r = 0;
  for (; r + 4 <= nr; r += 4) {
    float acc[4][kBc] = {};
    const float* a0 = a + size_t(r) * ld;
    for (int d = 0; d < head_dim; ++d) {
      const float* td = t + d * kBc;
      const float x0 = a0[d], x1 = a0[ld + d], x2 = a0[2 * ld + d], x3 = a0[3 * ld + d];
      for (int c = 0; c < kBc; ++c) {
        acc[0][c] += x0 * td[c];
        acc[1][c] += x1 * td[c];
        acc[2][c] += x2 * td[c];
        acc[3][c] += x3 * td[c];
      }
    }
    for (int i = 0; i < 4; ++i) {
      for (int c = 0; c < kBc; ++c) s[(r + i) * kBc + c] = scale * acc[i][c];
    }
  }
  for (; r < nr; ++r) {
    float acc[kBc] = {};
    const float* ar = a + size_t(r) * ld;
    for (int d = 0; d < head_dim; ++d) {
      const float* td = t + d * kBc;
      for (int c = 0; c < kBc; ++c) acc[c] += ar[d] * td[c];
    }
    for (int c = 0; c < kBc; ++c) s[r * kBc + c] = scale * acc[c];
  }
}

// y (n) += alpha * x (n).
inline void axpy(int n, float alpha, const float* x, float* y) {
  for (int d = 0; d < n; ++d) y[d] += alpha * x[d];
}

// The number of leading keys of a tile at positions k0.. that query position qp sees.
inline int visible(bool causal, int64_t qp, int64_t k0, int nc) {
  if (!causal) return nc;
  return int(std::clamp<int64_t>(qp - k0 + 1, 0, nc));
}

}  // namespace

void attention_forward(const AttentionShape& a, const QueryBlock& q, const KvBlock& kv, float* o,
                       int ldo, float* lse) {
  const int hd = a.head_dim;
  DTSIM_CHECK(hd > 0 && hd <= kMaxHeadDim && q.rows >= 0 && kv.rows >= 0);
  alignas(64) float kt[kMaxHeadDim * kBc];
  alignas(64) float s[kBr * kBc];
  alignas(64) float acc[kBr * kMaxHeadDim];
  float m[kBr], l[kBr];
  for (int i0 = 0; i0 < q.rows; i0 += kBr) {
    const int nr = std::min(kBr, q.rows - i0);
    const int64_t qlast = q.pos0 + i0 + nr - 1;
    std::fill_n(m, nr, kNegInf);
    std::fill_n(l, nr, 0.0f);
    std::fill_n(acc, nr * hd, 0.0f);
    for (int j0 = 0; j0 < kv.rows; j0 += kBc) {
      const int64_t k0 = kv.pos0 + j0;
      if (a.causal && k0 > qlast) break;  // this tile and all after it are masked
      const int nc = std::min(kBc, kv.rows - j0);
      transpose_tile(kv.k + size_t(j0) * kv.ld, kv.ld, nc, hd, kt);
      tile_product(q.q + size_t(i0) * q.ld, q.ld, nr, kt, hd, a.scale, s);
      for (int r = 0; r < nr; ++r) {
        const int n = visible(a.causal, q.pos0 + i0 + r, k0, nc);
        if (n == 0) continue;
        float* sr = s + r * kBc;
        float mx = m[r];
        for (int c = 0; c < n; ++c) mx = std::max(mx, sr[c]);
        const float corr = std::exp(m[r] - mx);  // 0 on the row's first visible tile
        float sum = 0.0f;
        for (int c = 0; c < n; ++c) {
          sr[c] = std::exp(sr[c] - mx);
          sum += sr[c];
        }
        l[r] = l[r] * corr + sum;
        m[r] = mx;
        float* ar = acc + r * hd;
        if (corr != 1.0f) {
          for (int d = 0; d < hd; ++d) ar[d] *= corr;
        }
        for (int c = 0; c < n; ++c) axpy(hd, sr[c], kv.v + size_t(j0 + c) * kv.ld, ar);
      }
    }
    for (int r = 0; r < nr; ++r) {
      float* orow = o + size_t(i0 + r) * ldo;
      if (l[r] == 0.0f) {
        std::fill_n(orow, hd, 0.0f);
        lse[i0 + r] = kNegInf;
        continue;
      }
      const float inv = 1.0f / l[r];
      for (int d = 0; d < hd; ++d) orow[d] = acc[r * hd + d] * inv;
      lse[i0 + r] = m[r] + std::log(l[r]);
    }
  }
}

void attention_merge(int head_dim, int rows, float* o_a, int ld_a, float* lse_a, const float* o_b,
                     int ld_b, const float* lse_b) {
  for (int r = 0; r < rows; ++r) {
    const float la = lse_a[r], lb = lse_b[r];
    if (lb == kNegInf) continue;  // b saw no key: a stays
    float* oa = o_a + size_t(r) * ld_a;
    const float* ob = o_b + size_t(r) * ld_b;
    if (la == kNegInf) {
      std::copy_n(ob, head_dim, oa);
      lse_a[r] = lb;
      continue;
    }
    const float mx = std::max(la, lb);
    const float lse = mx + std::log(std::exp(la - mx) + std::exp(lb - mx));
    const float wa = std::exp(la - lse), wb = std::exp(lb - lse);
    for (int d = 0; d < head_dim; ++d) oa[d] = wa * oa[d] + wb * ob[d];
    lse_a[r] = lse;
  }
}

void attention_backward_delta(int head_dim, int rows, const float* o, int ldo, const float* d_o,
                              int ld_do, float* delta) {
  for (int r = 0; r < rows; ++r) {
    const float* orow = o + size_t(r) * ldo;
    const float* drow = d_o + size_t(r) * ld_do;
    float sum = 0.0f;
    for (int d = 0; d < head_dim; ++d) sum += orow[d] * drow[d];
    delta[r] = sum;
  }
}

void attention_backward(const AttentionShape& a, const QueryBlock& q, const KvBlock& kv,
                        const float* d_o, int ld_do, const float* lse, const float* delta,
                        float* dq, int ld_dq, float* dk, float* dv, int ld_dkv) {
  const int hd = a.head_dim;
  DTSIM_CHECK(hd > 0 && hd <= kMaxHeadDim && q.rows >= 0 && kv.rows >= 0);
  alignas(64) float kt[kMaxHeadDim * kBc];
  alignas(64) float vt[kMaxHeadDim * kBc];
  alignas(64) float p[kBr * kBc];
  alignas(64) float dp[kBr * kBc];
  const int64_t qlast_all = q.pos0 + q.rows - 1;
  for (int j0 = 0; j0 < kv.rows; j0 += kBc) {
    const int64_t k0 = kv.pos0 + j0;
    if (a.causal && k0 > qlast_all) break;
    const int nc = std::min(kBc, kv.rows - j0);
    const float* kj = kv.k + size_t(j0) * kv.ld;
    const float* vj = kv.v + size_t(j0) * kv.ld;
    transpose_tile(kj, kv.ld, nc, hd, kt);
    transpose_tile(vj, kv.ld, nc, hd, vt);
    for (int i0 = 0; i0 < q.rows; i0 += kBr) {
      const int nr = std::min(kBr, q.rows - i0);
      if (a.causal && q.pos0 + i0 + nr - 1 < k0) continue;  // every query before every key
      const float* qi = q.q + size_t(i0) * q.ld;
      const float* doi = d_o + size_t(i0) * ld_do;
      tile_product(qi, q.ld, nr, kt, hd, a.scale, p);
      tile_product(doi, ld_do, nr, vt, hd, 1.0f, dp);
      for (int r = 0; r < nr; ++r) {
        const int n = visible(a.causal, q.pos0 + i0 + r, k0, nc);
        float* pr = p + r * kBc;
        float* dsr = dp + r * kBc;  // dP, then dS in place (times scale)
        const float lr = lse[i0 + r], dr = delta[i0 + r];
        if (lr == kNegInf) continue;  // the row saw no key at all
        for (int c = 0; c < n; ++c) {
          pr[c] = std::exp(pr[c] - lr);
          dsr[c] = a.scale * pr[c] * (dsr[c] - dr);
        }
        const float* dor = doi + size_t(r) * ld_do;
        const float* qr = qi + size_t(r) * q.ld;
        for (int c = 0; c < n; ++c) {
          if (dv) axpy(hd, pr[c], dor, dv + size_t(j0 + c) * ld_dkv);
          if (dk) axpy(hd, dsr[c], qr, dk + size_t(j0 + c) * ld_dkv);
          if (dq) axpy(hd, dsr[c], kj + size_t(c) * kv.ld, dq + size_t(i0 + r) * ld_dq);
        }
      }
    }
  }
}

}  // namespace dtsim::model
