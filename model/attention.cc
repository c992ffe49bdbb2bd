#include "model/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <cstdint>
#include <memory>

#include "model/check.h"
#include "model/gemm.h"
#include "model/gemm_avx2_tile.h"
#include "model/kernels.h"

namespace dtsim::model {
namespace {

constexpr int kBr = 32;   // query rows per tile
constexpr int kBc = 128;  // key/value rows per tile (at most)
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
#if DTSIM_GEMM_AVX2
using avx2::kMr;
using avx2::kNr;
#endif

// The number of leading keys of a tile at positions k0.. that query position qp sees.
inline int visible(bool causal, int64_t qp, int64_t k0, int nc) {
  if (!causal) return nc;
  return int(std::clamp<int64_t>(qp - k0 + 1, 0, nc));
}

// An operand B (k, n) of many tile products, copied once per call: on dtsim's AVX2 GEMM in
// its kNr-column panels (gemm_avx2_pack.h), so the products run its register tiles with no
// packing per product; else row-major for sgemm. Either way each C element is the same
// in-order FMA chain as sgemm's (gemm.h), so the same bits.
struct Packed {
  float* data;
  ptrdiff_t stride;  // floats from one panel (AVX2) or row (else) to the next
};

// This thread's buffer `slot` of at least n floats, 64-byte aligned, grown once and kept.
float* buffer(int slot, size_t n) {
  thread_local std::unique_ptr<float[]> mem[5];
  thread_local size_t cap[5] = {};
  if (cap[slot] < n + 16) {
    mem[slot] = std::make_unique<float[]>(n + 16);
    cap[slot] = n + 16;
  }
  float* m = mem[slot].get();
  return m + (16 - (reinterpret_cast<uintptr_t>(m) / sizeof(float)) % 16) % 16;
}

// B (k, n) into buffer `slot`: B(r, j) = src[r * ld + j], or src[j * ld + r] if transposed.
Packed pack(int slot, const float* src, int ld, int k, int n, bool transposed) {
#if DTSIM_GEMM_AVX2
  const ptrdiff_t stride = avx2::panel_stride(k);
  float* out = buffer(slot, size_t(stride) * ((n + kNr - 1) / kNr));
  if (transposed) {
    avx2::pack_panels_transposed(src, ld, k, 0, n, out);
  } else {
    avx2::pack_panels(src, ld, k, 0, n, out);
  }
  return {out, stride};
#else
  float* out = buffer(slot, size_t(k) * n);
  for (int r = 0; r < k; ++r) {
    for (int j = 0; j < n; ++j)
      out[size_t(r) * n + j] = transposed ? src[size_t(j) * ld + r] : src[size_t(r) * ld + j];
  }
  return {out, n};
#endif
}

#if DTSIM_GEMM_AVX2
// A register tile's rows into C (row stride ldc), columns < cols only; kAdd: C += tile.
// 16 bytes, so that micro_tile gets it in registers (gemm_avx2_tile.h).
template <bool kAdd>
struct TileOut {
  float* c;
  int ldc;
  int cols;
  void operator()(int row, int col, __m256 lo, __m256 hi) const {
    float* dst = c + ptrdiff_t(row) * ldc + col;
    if (col + kNr <= cols) {
      if constexpr (kAdd) {
        lo = _mm256_add_ps(_mm256_loadu_ps(dst), lo);
        hi = _mm256_add_ps(_mm256_loadu_ps(dst + 8), hi);
      }
      _mm256_storeu_ps(dst, lo);
      _mm256_storeu_ps(dst + 8, hi);
      return;
    }
    alignas(32) float t[kNr];
    _mm256_store_ps(t, lo);
    _mm256_store_ps(t + 8, hi);
    for (int j = 0; j < cols - col; ++j) dst[j] = kAdd ? dst[j] + t[j] : t[j];
  }
#if DTSIM_GEMM_AVX512
  void operator()(int row, int col, __m512 v) const {
    float* dst = c + ptrdiff_t(row) * ldc + col;
    const int n = cols - col;
    if (n <= 0) return;
    const __mmask16 m = n >= kNr ? __mmask16(0xffff) : __mmask16((1u << n) - 1);
    if constexpr (kAdd) v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, dst), v);
    _mm512_mask_storeu_ps(dst, m, v);
  }
#endif
};

template <bool kUnitK, bool kAdd>
void run_tiles(const avx2::Operands& o, int m, int n, float* c, int ldc) {
  const TileOut<kAdd> out{c, ldc, n};
  constexpr int step = avx2::kPairs ? 2 * kNr : kNr;
  for (int j0 = 0; j0 < n; j0 += step) {
    for (int r0 = 0; r0 < m; r0 += kMr) {
      const int mr = std::min(kMr, m - r0);
      if (avx2::kPairs && j0 + kNr < n) {
        avx2::micro_tile_pair<kUnitK>(o, r0, mr, j0, out);
      } else {
        avx2::micro_tile<kUnitK>(o, r0, mr, j0, out);
      }
    }
  }
}
#endif

// C (m, n) (+= if add, else =) op(A) (m, k) * B(k0 .., j0 ..) (k, n), j0 a multiple of
// 16 (a panel's first column); A (m, k) at row stride lda, or stored (k, m) when trans_a.
void product(bool trans_a, int m, int n, int k, const float* a, int lda, const Packed& b, int k0,
             int j0, bool add, float* c, int ldc) {
  if (m == 0 || n == 0) return;
#if DTSIM_GEMM_AVX2
  const avx2::Operands o{a,
                         trans_a ? 1 : lda,
                         trans_a ? lda : 1,
                         b.data + ptrdiff_t(j0 / kNr) * b.stride + ptrdiff_t(k0) * kNr,
                         b.stride,
                         k};
  if (trans_a) {
    add ? run_tiles<false, true>(o, m, n, c, ldc) : run_tiles<false, false>(o, m, n, c, ldc);
  } else {
    add ? run_tiles<true, true>(o, m, n, c, ldc) : run_tiles<true, false>(o, m, n, c, ldc);
  }
#else
  sgemm(trans_a, false, m, n, k, a, lda, b.data + k0 * b.stride + j0, int(b.stride),
        add ? 1.0f : 0.0f, c, ldc);
#endif
}

}  // namespace

void attention_forward(const AttentionShape& a, const QueryBlock& q, const KvBlock& kv, float* o,
                       int ldo, float* lse) {
  const int hd = a.head_dim;
  DTSIM_CHECK(hd > 0 && hd <= kMaxHeadDim && a.scale > 0 && q.rows >= 0 && kv.rows >= 0);
  alignas(64) float s[kBr * kBc];
  alignas(64) float acc[kBr * kMaxHeadDim];
  float m[kBr], l[kBr];
  // The keys any query row sees: K^T and V of those packed once.
  const int nk =
      a.causal ? int(std::clamp<int64_t>(q.pos0 + q.rows - kv.pos0, 0, kv.rows)) : kv.rows;
  const Packed kt = pack(0, kv.k, kv.ld, hd, nk, true);
  const Packed vp = pack(1, kv.v, kv.ld, nk, hd, false);
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
      product(false, nr, nc, hd, q.q + size_t(i0) * q.ld, q.ld, kt, 0, j0, false, s, kBc);
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
      product(false, nr, hd, nc, s, kBc, vp, j0, 0, true, acc, hd);
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
  // The keys any query row sees, and the operands every tile product reads, packed once.
  const int nk =
      a.causal ? int(std::clamp<int64_t>(q.pos0 + q.rows - kv.pos0, 0, kv.rows)) : kv.rows;
  const Packed kt = pack(0, kv.k, kv.ld, hd, nk, true);                       // K^T for S = Q K^T
  const Packed vt = pack(1, kv.v, kv.ld, hd, nk, true);                       // V^T for dP = dO V^T
  const Packed kp = dq ? pack(2, kv.k, kv.ld, nk, hd, false) : Packed{};      // dQ += dS K
  const Packed dop = dv ? pack(3, d_o, ld_do, q.rows, hd, false) : Packed{};  // dV += P^T dO
  const Packed qp = dk ? pack(4, q.q, q.ld, q.rows, hd, false) : Packed{};    // dK += dS^T Q
  const int64_t qlast_all = q.pos0 + q.rows - 1;
  for (int j0 = 0; j0 < nk; j0 += kBc) {
    const int64_t k0 = kv.pos0 + j0;
    if (a.causal && k0 > qlast_all) break;
    const int nc_all = std::min(kBc, nk - j0);
    for (int i0 = 0; i0 < q.rows; i0 += kBr) {
      const int nr = std::min(kBr, q.rows - i0);
      const int64_t qlast = q.pos0 + i0 + nr - 1;
      if (a.causal && qlast < k0) continue;  // every query before every key
      // Keys after the tile's last query are masked for all its rows: left out.
      const int nc = a.causal ? int(std::min<int64_t>(nc_all, qlast - k0 + 1)) : nc_all;
      const float* qi = q.q + size_t(i0) * q.ld;
      const float* doi = d_o + size_t(i0) * ld_do;
      product(false, nr, nc, hd, qi, q.ld, kt, 0, j0, false, p, kBc);
      product(false, nr, nc, hd, doi, ld_do, vt, 0, j0, false, ds, kBc);
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
      if (dv) product(true, nc, hd, nr, p, kBc, dop, i0, 0, true, dv + size_t(j0) * ld_dkv, ld_dkv);
      if (dk) product(true, nc, hd, nr, ds, kBc, qp, i0, 0, true, dk + size_t(j0) * ld_dkv, ld_dkv);
      if (dq) product(false, nr, hd, nc, ds, kBc, kp, j0, 0, true, dq + size_t(i0) * ld_dq, ld_dq);
    }
  }
}

}  // namespace dtsim::model
