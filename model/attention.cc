#include "model/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "model/check.h"
#include "model/gemm.h"
#include "model/kernels.h"

namespace dtsim::model {
namespace {

constexpr int kBr = 32;   // query rows per tile
constexpr int kBc = 128;  // key/value rows per tile (at most)
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The number of leading keys of a tile at positions k0.. that query position qp sees.
inline int visible(bool causal, int64_t qp, int64_t k0, int nc) {
  if (!causal) return nc;
  return int(std::clamp<int64_t>(qp - k0 + 1, 0, nc));
}

// X^T (hd, n) of rows [0, n) of x (row stride ld) into this thread's buffer `slot`, grown
// once and kept; returns it (row stride n). The products q k^T and dO v^T then run as
// plain A * B on it: the same FMA chains, so the same bits as A * B^T (gemm.h), without the
// transposed path's gather of C^T.
#if defined(__AVX2__)
// dst (8 rows at ldd) = src (8 rows at lds)^T, 8 x 8 floats.
inline void transpose8(const float* src, size_t lds, float* dst, size_t ldd) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * lds);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(dst + i * ldd, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
    _mm256_storeu_ps(dst + (i + 4) * ldd, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
  }
}
#endif

// X^T (hd, n) of rows [0, n) of x (row stride ld) into this thread's buffer `slot`, grown
// once and kept; returns it (row stride n). The products q k^T and dO v^T then run as
// plain A * B on it: the same FMA chains, so the same bits as A * B^T (gemm.h), without the
// transposed path's gather of C^T.
const float* transpose_rows(const float* x, int ld, int n, int hd, int slot) {
  thread_local std::vector<float> buffers[2];
  std::vector<float>& buf = buffers[slot];
  if (buf.size() < size_t(n) * hd) buf.resize(size_t(n) * hd);
  float* t = buf.data();
  int r0 = 0, d0 = 0;
#if defined(__AVX2__)
  for (r0 = 0; r0 + 8 <= n; r0 += 8) {
    for (d0 = 0; d0 + 8 <= hd; d0 += 8) {
      transpose8(x + size_t(r0) * ld + d0, size_t(ld), t + size_t(d0) * n + r0, size_t(n));
    }
  }
  for (int d = 0; d < d0 && r0 < n; ++d) {  // the last rows' (n % 8) whole columns
    for (int r = r0; r < n; ++r) t[size_t(d) * n + r] = x[size_t(r) * ld + d];
  }
#endif
  for (int d = d0; d < hd; ++d) {  // the columns after the last whole 8 (all rows)
    for (int r = 0; r < n; ++r) t[size_t(d) * n + r] = x[size_t(r) * ld + d];
  }
  return t;
}

}  // namespace

void attention_forward(const AttentionShape& a, const QueryBlock& q, const KvBlock& kv, float* o,
                       int ldo, float* lse) {
  const int hd = a.head_dim;
  DTSIM_CHECK(hd > 0 && hd <= kMaxHeadDim && a.scale > 0 && q.rows >= 0 && kv.rows >= 0);
  alignas(64) float s[kBr * kBc];
  alignas(64) float acc[kBr * kMaxHeadDim];
  float m[kBr], l[kBr];
  // The keys any query row sees: K^T of those once.
  const int nk =
      a.causal ? int(std::clamp<int64_t>(q.pos0 + q.rows - kv.pos0, 0, kv.rows)) : kv.rows;
  const float* kt = transpose_rows(kv.k, kv.ld, nk, hd, 0);
  for (int i0 = 0; i0 < q.rows; i0 += kBr) {
    const int nr = std::min(kBr, q.rows - i0);
    const int64_t qlast = q.pos0 + i0 + nr - 1;
    std::fill_n(m, nr, kNegInf);
    std::fill_n(l, nr, 0.0f);
    std::fill_n(acc, nr * hd, 0.0f);
    for (int j0 = 0; j0 < kv.rows; j0 += kBc) {
      const int64_t k0 = kv.pos0 + j0;
      if (a.causal && k0 > qlast) break;  // this tile and all after it are masked
      // Keys after the tile's last query are masked for all its rows: left out.
      const int nc = int(
          std::min<int64_t>(std::min(kBc, kv.rows - j0), a.causal ? qlast - k0 + 1 : int64_t{kBc}));
      const float* vj = kv.v + size_t(j0) * kv.ld;
      sgemm(false, false, nr, nc, hd, q.q + size_t(i0) * q.ld, q.ld, kt + j0, nk, 0.0f, s, kBc);
      for (int r = 0; r < nr; ++r) {
        const int n = visible(a.causal, q.pos0 + i0 + r, k0, nc);
        float* sr = s + r * kBc;
        std::fill(sr + n, sr + nc, 0.0f);  // masked: no weight in P v
        if (n == 0) continue;
        // The max of the scaled logits from the unscaled ones' (scale > 0).
        const float mx = std::max(m[r], a.scale * max_of(sr, n));
        const float corr = std::exp(m[r] - mx);  // 0 on the row's first visible tile
        const float sum = exp_scaled_shifted(sr, n, a.scale, mx);
        l[r] = l[r] * corr + sum;
        m[r] = mx;
        if (corr != 1.0f) {
          float* ar = acc + r * hd;
          for (int d = 0; d < hd; ++d) ar[d] *= corr;
        }
      }
      sgemm(false, false, nr, hd, nc, s, kBc, vj, kv.ld, 1.0f, acc, hd);
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
  // Eight rows at a time, each still one chain over d in order: the chains overlap.
  constexpr int kRows = 8;
  int r0 = 0;
  for (; r0 + kRows <= rows; r0 += kRows) {
    float sum[kRows] = {};
    for (int d = 0; d < head_dim; ++d) {
      for (int j = 0; j < kRows; ++j) {
        sum[j] += o[size_t(r0 + j) * ldo + d] * d_o[size_t(r0 + j) * ld_do + d];
      }
    }
    for (int j = 0; j < kRows; ++j) delta[r0 + j] = sum[j];
  }
  for (int r = r0; r < rows; ++r) {
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
  DTSIM_CHECK(hd > 0 && hd <= kMaxHeadDim && a.scale > 0 && q.rows >= 0 && kv.rows >= 0);
  alignas(64) float p[kBr * kBc];
  alignas(64) float ds[kBr * kBc];
  const int64_t qlast_all = q.pos0 + q.rows - 1;
  for (int j0 = 0; j0 < kv.rows; j0 += kBc) {
    const int64_t k0 = kv.pos0 + j0;
    if (a.causal && k0 > qlast_all) break;
    const int nc_all = std::min(kBc, kv.rows - j0);
    const float* kj = kv.k + size_t(j0) * kv.ld;
    const float* vj = kv.v + size_t(j0) * kv.ld;
    // K^T and V^T of the tile, once for all its query tiles.
    const float* ktj = transpose_rows(kj, kv.ld, nc_all, hd, 0);
    const float* vtj = transpose_rows(vj, kv.ld, nc_all, hd, 1);
    for (int i0 = 0; i0 < q.rows; i0 += kBr) {
      const int nr = std::min(kBr, q.rows - i0);
      const int64_t qlast = q.pos0 + i0 + nr - 1;
      if (a.causal && qlast < k0) continue;  // every query before every key
      // Keys after the tile's last query are masked for all its rows: left out.
      const int nc = a.causal ? int(std::min<int64_t>(nc_all, qlast - k0 + 1)) : nc_all;
      const float* qi = q.q + size_t(i0) * q.ld;
      const float* doi = d_o + size_t(i0) * ld_do;
      sgemm(false, false, nr, nc, hd, qi, q.ld, ktj, nc_all, 0.0f, p, kBc);
      sgemm(false, false, nr, nc, hd, doi, ld_do, vtj, nc_all, 0.0f, ds, kBc);
      for (int r = 0; r < nr; ++r) {
        const float lr = lse[i0 + r], dr = delta[i0 + r];
        // The row's visible keys (none if it saw no key at all).
        const int n = lr == kNegInf ? 0 : visible(a.causal, q.pos0 + i0 + r, k0, nc);
        float* pr = p + r * kBc;
        float* dsr = ds + r * kBc;  // dP, then dS times scale in place
        exp_scaled_shifted(pr, n, a.scale, lr);
        for (int c = 0; c < n; ++c) dsr[c] = a.scale * pr[c] * (dsr[c] - dr);
        std::fill(pr + n, pr + nc, 0.0f);
        std::fill(dsr + n, dsr + nc, 0.0f);
      }
      if (dv) {
        sgemm(true, false, nc, hd, nr, p, kBc, doi, ld_do, 1.0f, dv + size_t(j0) * ld_dkv, ld_dkv);
      }
      if (dk) {
        sgemm(true, false, nc, hd, nr, ds, kBc, qi, q.ld, 1.0f, dk + size_t(j0) * ld_dkv, ld_dkv);
      }
      if (dq)
        sgemm(false, false, nr, hd, nc, ds, kBc, kj, kv.ld, 1.0f, dq + size_t(i0) * ld_dq, ld_dq);
    }
  }
}

}  // namespace dtsim::model
