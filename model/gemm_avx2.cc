#include "model/gemm_avx2.h"
#include "model/gemm_avx2_pack.h"

#if DTSIM_GEMM_AVX2
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <type_traits>

namespace dtsim::model::avx2 {
namespace {

// The product P (rows, K) * Q (K, cols). P's element (r, k) is at p[r * prs + k] when
// kUnitK, else at p[(r0 / kMr) * kMr * prs + k * pks + r - r0] for the tile at r0 (prs = 1
// for a plain (K, rows) array; prs = K, pks = kMr for pack_tiles' layout). Q is in kNr-wide
// zero-padded panels of K rows: columns j0 .. j0 + 15 at step k start at q + (j0 / kNr) *
// q_panel + k * kNr (q_panel = panel_stride(K)).
struct Operands {
  const float* p;
  ptrdiff_t prs, pks;
  const float* q;
  ptrdiff_t q_panel;
  int k;
};

// Computes the (MR, kNr) tile at rows r0, columns j0 and calls out(r, lo, hi) with row r's
// 16 sums (two vectors). The twelve accumulators are named variables, not an array: GCC
// keeps an array of __m256 on the stack and stores it every step.
template <int MR, bool kUnitK, class Out>
void micro(const Operands& o, int r0, int j0, Out&& out) {
  const __m256 z = _mm256_setzero_ps();
  __m256 c00 = z, c01 = z, c10 = z, c11 = z, c20 = z, c21 = z;
  __m256 c30 = z, c31 = z, c40 = z, c41 = z, c50 = z, c51 = z;
  const float* q = o.q + ptrdiff_t(j0 / kNr) * o.q_panel;
  const ptrdiff_t pks = o.pks, prs = o.prs;
  const float* p = o.p + ptrdiff_t(r0) * prs;  // P(r0 + r, k) at p + r * prs + k, p + k * pks + r
  const int kend = o.k;
  for (int k = 0; k < kend; ++k) {
    const __m256 b0 = _mm256_loadu_ps(q), b1 = _mm256_loadu_ps(q + 8);
    const float* pk = kUnitK ? p + k : p;
#define DTSIM_GEMM_ROW(r)                                              \
  if constexpr (MR > r) {                                              \
    const __m256 a = _mm256_broadcast_ss(pk + (kUnitK ? r * prs : r)); \
    c##r##0 = _mm256_fmadd_ps(a, b0, c##r##0);                         \
    c##r##1 = _mm256_fmadd_ps(a, b1, c##r##1);                         \
  }
    DTSIM_GEMM_ROW(0)
    DTSIM_GEMM_ROW(1)
    DTSIM_GEMM_ROW(2)
    DTSIM_GEMM_ROW(3)
    DTSIM_GEMM_ROW(4)
    DTSIM_GEMM_ROW(5)
#undef DTSIM_GEMM_ROW
    q += kNr;
    if (!kUnitK) p += pks;
  }
  out(0, c00, c01);
  if constexpr (MR > 1) out(1, c10, c11);
  if constexpr (MR > 2) out(2, c20, c21);
  if constexpr (MR > 3) out(3, c30, c31);
  if constexpr (MR > 4) out(4, c40, c41);
  if constexpr (MR > 5) out(5, c50, c51);
}

template <bool kUnitK, class Out>
void micro_tile(const Operands& o, int r0, int rows, int j0, Out&& out) {
  switch (rows) {
    case 6:
      return micro<6, kUnitK>(o, r0, j0, out);
    case 5:
      return micro<5, kUnitK>(o, r0, j0, out);
    case 4:
      return micro<4, kUnitK>(o, r0, j0, out);
    case 3:
      return micro<3, kUnitK>(o, r0, j0, out);
    case 2:
      return micro<2, kUnitK>(o, r0, j0, out);
    default:
      return micro<1, kUnitK>(o, r0, j0, out);
  }
}

#if DTSIM_GEMM_AVX512
// Two adjacent panels at once (columns j0 .. j0 + 31) on AVX-512: MR rows by two 16-lane
// registers, one load per panel and MR broadcasts per k step; the same in-order FMA chain
// per element as micro(), so the same bits. out(r, h, lo, hi) gets row r of panel h.
constexpr bool kPairs = true;

template <int MR, bool kUnitK, class Out>
void micro_pair(const Operands& o, int r0, int j0, Out&& out) {
  const __m512 z = _mm512_setzero_ps();
  __m512 c00 = z, c01 = z, c10 = z, c11 = z, c20 = z, c21 = z;
  __m512 c30 = z, c31 = z, c40 = z, c41 = z, c50 = z, c51 = z;
  const float* q = o.q + ptrdiff_t(j0 / kNr) * o.q_panel;
  const ptrdiff_t q2 = o.q_panel, pks = o.pks, prs = o.prs;
  const float* p = o.p + ptrdiff_t(r0) * prs;
  const int kend = o.k;
  for (int k = 0; k < kend; ++k) {
    const __m512 b0 = _mm512_loadu_ps(q), b1 = _mm512_loadu_ps(q + q2);
    const float* pk = kUnitK ? p + k : p;
#define DTSIM_GEMM_ROW(r)                                      \
  if constexpr (MR > r) {                                      \
    const __m512 a = _mm512_set1_ps(pk[kUnitK ? r * prs : r]); \
    c##r##0 = _mm512_fmadd_ps(a, b0, c##r##0);                 \
    c##r##1 = _mm512_fmadd_ps(a, b1, c##r##1);                 \
  }
    DTSIM_GEMM_ROW(0)
    DTSIM_GEMM_ROW(1)
    DTSIM_GEMM_ROW(2)
    DTSIM_GEMM_ROW(3)
    DTSIM_GEMM_ROW(4)
    DTSIM_GEMM_ROW(5)
#undef DTSIM_GEMM_ROW
    q += kNr;
    if (!kUnitK) p += pks;
  }
  auto put = [&](int r, __m512 v0, __m512 v1) {
    out(r, 0, _mm512_castps512_ps256(v0), _mm512_extractf32x8_ps(v0, 1));
    out(r, 1, _mm512_castps512_ps256(v1), _mm512_extractf32x8_ps(v1, 1));
  };
  put(0, c00, c01);
  if constexpr (MR > 1) put(1, c10, c11);
  if constexpr (MR > 2) put(2, c20, c21);
  if constexpr (MR > 3) put(3, c30, c31);
  if constexpr (MR > 4) put(4, c40, c41);
  if constexpr (MR > 5) put(5, c50, c51);
}

template <bool kUnitK, class Out>
void micro_tile_pair(const Operands& o, int r0, int rows, int j0, Out&& out) {
  switch (rows) {
    case 6:
      return micro_pair<6, kUnitK>(o, r0, j0, out);
    case 5:
      return micro_pair<5, kUnitK>(o, r0, j0, out);
    case 4:
      return micro_pair<4, kUnitK>(o, r0, j0, out);
    case 3:
      return micro_pair<3, kUnitK>(o, r0, j0, out);
    case 2:
      return micro_pair<2, kUnitK>(o, r0, j0, out);
    default:
      return micro_pair<1, kUnitK>(o, r0, j0, out);
  }
}
#else
constexpr bool kPairs = false;

template <bool kUnitK, class Out>
void micro_tile_pair(const Operands&, int, int, int, Out&&) {}
#endif

// Weight-gradient panels per chunk, rows outer: up to 1024 columns (K = 64: 256 KiB).
constexpr int kWidePanels = 64;

// Q as stored: Q(k, j) at src[k * ld + j], or at src[j * ld + k] when transposed (the
// weight (out, in) of an x W^T product).
struct QSource {
  const float* src;
  ptrdiff_t ld;
  bool transposed;
};

// Fetches the line at p (kWrite: for ownership, about to be written). In asm: built with
// _mm_prefetch, GCC 12 -O2 left no prefetch instruction in this file (objdump).
template <bool kWrite>
inline void prefetch_line(const float* p) {
  if constexpr (kWrite) {
    asm volatile("prefetchw %0" : : "m"(*reinterpret_cast<const char*>(p)));
  } else {
    asm volatile("prefetcht1 %0" : : "m"(*reinterpret_cast<const char*>(p)));
  }
}

// Prefetches the kNr floats at p + r * ld for r < rows (two lines: p may be unaligned).
template <bool kWrite>
void prefetch_rows(const float* p, ptrdiff_t ld, int rows) {
  for (int r = 0; r < rows; ++r) {
    prefetch_line<kWrite>(p + r * ld);
    prefetch_line<kWrite>(p + r * ld + kNr - 1);
  }
}

// Prefetches rows r0 .. r0 + rows - 1 of a unit-k P (the next tile's, read where it lies:
// a weight's rows, from L3) while the current tile's products run.
void prefetch_tile_rows(const Operands& o, int r0, int rows) {
  for (int r = 0; r < rows; ++r) {
    const float* row = o.p + ptrdiff_t(r0 + r) * o.prs;
    for (int kk = 0; kk < o.k; kk += 16) prefetch_line<false>(row + kk);
    prefetch_line<false>(row + o.k - 1);
  }
}

// Runs every tile of P (rows, K) * Q (K, cols) and hands it to epi(r0, rows, j0, cols, t),
// after epi.prefetch(r0, rows, j0) before the tile's product; an Epi with kDirect takes
// whole tiles row by row from the registers instead, epi.direct(row, j0, lo, hi). Q is
// packed `chunk` panels at a time (pack_panels): a weight's rows lie 1-4 KiB apart, so
// read in place a panel's lines would share a few L1 sets and evict each other. Within a
// chunk, rows_outer keeps a P tile in L1 across Q's panels and walks C along its rows (for
// a C that is a weight gradient: walked by columns, a tile's rows share one L1 set);
// columns outer keeps a Q panel in L1 across P's tiles.
template <bool kUnitK, class Epi>
void run(Operands o, int rows, int cols, const QSource& q, int chunk, bool rows_outer, Epi&& epi) {
  alignas(64) float t[kMr * kNr];
  auto tile = [&](int r0, int j0) {
    const int mr = std::min(kMr, rows - r0), nc = std::min(kNr, cols - j0);
    epi.prefetch(r0, mr, j0);  // what the epilogue reads arrives while the tile computes
    if constexpr (std::remove_cvref_t<Epi>::kDirect) {
      if (nc == kNr) {  // a whole tile: straight from the registers
        micro_tile<kUnitK>(o, r0, mr, j0,
                           [&](int r, __m256 lo, __m256 hi) { epi.direct(r0 + r, j0, lo, hi); });
        return;
      }
    }
    micro_tile<kUnitK>(o, r0, mr, j0, [&](int r, __m256 lo, __m256 hi) {
      _mm256_store_ps(t + r * kNr, lo);
      _mm256_store_ps(t + r * kNr + 8, hi);
    });
    epi(r0, mr, j0, nc, t);
  };
  // Panels j0 and j0 + kNr (both packed; the second may be partial) in one pass.
  alignas(64) float t2[kMr * kNr];
  auto tile_pair = [&](int r0, int j0) {
    const int mr = std::min(kMr, rows - r0), nc = std::min(kNr, cols - j0 - kNr);
    epi.prefetch(r0, mr, j0);
    epi.prefetch(r0, mr, j0 + kNr);
    if constexpr (std::remove_cvref_t<Epi>::kDirect) {
      if (nc == kNr) {
        micro_tile_pair<kUnitK>(o, r0, mr, j0, [&](int r, int h, __m256 lo, __m256 hi) {
          epi.direct(r0 + r, j0 + h * kNr, lo, hi);
        });
        return;
      }
    }
    micro_tile_pair<kUnitK>(o, r0, mr, j0, [&](int r, int h, __m256 lo, __m256 hi) {
      float* dst = (h == 0 ? t : t2) + r * kNr;
      _mm256_store_ps(dst, lo);
      _mm256_store_ps(dst + 8, hi);
    });
    epi(r0, mr, j0, kNr, t);
    epi(r0, mr, j0 + kNr, nc, t2);
  };
  const int width = chunk * kNr;
  o.q_panel = panel_stride(o.k);
  float* panels = scratch(0, size_t(chunk) * o.q_panel);
  for (int c0 = 0; c0 < cols; c0 += width) {
    const int c1 = std::min(cols, c0 + width);
    if (q.transposed) {
      pack_panels_transposed(q.src, q.ld, o.k, c0, c1 - c0, panels);
    } else {
      pack_panels(q.src, q.ld, o.k, c0, c1 - c0, panels);
    }
    o.q = panels - ptrdiff_t(c0 / kNr) * o.q_panel;  // panel of column j0 at (j0 / kNr)
    // With kPairs, two panels at a time while two are left.
    const int step = kPairs ? 2 * kNr : kNr;
    if (rows_outer) {
      for (int r0 = 0; r0 < rows; r0 += kMr) {
        if constexpr (kUnitK) prefetch_tile_rows(o, r0 + kMr, std::min(kMr, rows - r0 - kMr));
        for (int j0 = c0; j0 < c1; j0 += step) {
          if (kPairs && j0 + kNr < c1) {
            tile_pair(r0, j0);
          } else {
            tile(r0, j0);
          }
        }
      }
    } else {
      for (int j0 = c0; j0 < c1; j0 += step) {
        for (int r0 = 0; r0 < rows; r0 += kMr) {
          if (kPairs && j0 + kNr < c1) {
            tile_pair(r0, j0);
          } else {
            tile(r0, j0);
          }
        }
      }
    }
  }
}

// Panels per chunk when columns go outer: a chunk of at most 128 KiB (in L2), one panel at
// least.
int column_chunk(int k) { return std::max(1, (32 * 1024) / (kNr * std::max(k, 1))); }

// C = beta * C + t on the tile, C row-major with leading dimension ldc.
struct StoreEpi {
  static constexpr bool kDirect = true;
  float* c;
  int ldc;
  float beta;
  void prefetch(int r0, int rows, int j0) const {
    if (beta != 0.0f) {
      prefetch_rows<false>(c + ptrdiff_t(r0) * ldc + j0, ldc, rows);
    } else {  // written only: fetched for ownership while the tile computes
      prefetch_rows<true>(c + ptrdiff_t(r0) * ldc + j0, ldc, rows);
    }
  }
  void direct(int row, int j0, __m256 lo, __m256 hi) const {
    float* dst = c + ptrdiff_t(row) * ldc + j0;
    if (beta == 1.0f) {
      lo = _mm256_add_ps(_mm256_loadu_ps(dst), lo);
      hi = _mm256_add_ps(_mm256_loadu_ps(dst + 8), hi);
    } else if (beta != 0.0f) {
      const __m256 b = _mm256_set1_ps(beta);
      lo = _mm256_add_ps(_mm256_mul_ps(b, _mm256_loadu_ps(dst)), lo);
      hi = _mm256_add_ps(_mm256_mul_ps(b, _mm256_loadu_ps(dst + 8)), hi);
    }
    _mm256_storeu_ps(dst, lo);
    _mm256_storeu_ps(dst + 8, hi);
  }
  void operator()(int r0, int rows, int j0, int cols, const float* t) const {
    for (int r = 0; r < rows; ++r) {
      float* dst = c + ptrdiff_t(r0 + r) * ldc + j0;
      const float* src = t + r * kNr;
      if (beta == 0.0f) {
        for (int j = 0; j < cols; ++j) dst[j] = src[j];
      } else if (beta == 1.0f) {
        for (int j = 0; j < cols; ++j) dst[j] = dst[j] + src[j];
      } else {
        for (int j = 0; j < cols; ++j) dst[j] = beta * dst[j] + src[j];
      }
    }
  }
};

// C = bias + t on the tile, bias (cols) added to every row: bitwise StoreEpi with beta 1 onto
// rows that hold the bias, without writing them first and reading them back.
struct BiasEpi {
  static constexpr bool kDirect = true;
  float* c;
  int ldc;
  const float* bias;
  void prefetch(int r0, int rows, int j0) const {
    prefetch_rows<true>(c + ptrdiff_t(r0) * ldc + j0, ldc, rows);
  }
  void direct(int row, int j0, __m256 lo, __m256 hi) const {
    float* dst = c + ptrdiff_t(row) * ldc + j0;
    _mm256_storeu_ps(dst, _mm256_add_ps(_mm256_loadu_ps(bias + j0), lo));
    _mm256_storeu_ps(dst + 8, _mm256_add_ps(_mm256_loadu_ps(bias + j0 + 8), hi));
  }
  void operator()(int r0, int rows, int j0, int cols, const float* t) const {
    for (int r = 0; r < rows; ++r) {
      float* dst = c + ptrdiff_t(r0 + r) * ldc + j0;
      for (int j = 0; j < cols; ++j) dst[j] = bias[j0 + j] + t[r * kNr + j];
    }
  }
};

// W = u.apply(W, t) on the tile: W's SGD step by the gradient t, which is never stored.
// The vector arithmetic is SgdUpdate::apply's, operation for operation (no contraction).
struct SgdEpi {
  static constexpr bool kDirect = true;
  float* c;
  int ldc;
  SgdUpdate u;
  void prefetch(int r0, int rows, int j0) const {
    prefetch_rows<true>(c + ptrdiff_t(r0) * ldc + j0, ldc, rows);  // read, then written
  }
  __m256 apply(__m256 w, __m256 g) const {
    const __m256 step = _mm256_add_ps(g, _mm256_mul_ps(_mm256_set1_ps(u.weight_decay), w));
    return _mm256_sub_ps(w, _mm256_mul_ps(_mm256_set1_ps(u.lr), step));
  }
  void direct(int row, int j0, __m256 lo, __m256 hi) const {
    float* dst = c + ptrdiff_t(row) * ldc + j0;
    _mm256_storeu_ps(dst, apply(_mm256_loadu_ps(dst), lo));
    _mm256_storeu_ps(dst + 8, apply(_mm256_loadu_ps(dst + 8), hi));
  }
  void operator()(int r0, int rows, int j0, int cols, const float* t) const {
    for (int r = 0; r < rows; ++r) {
      float* dst = c + ptrdiff_t(r0 + r) * ldc + j0;
      for (int j = 0; j < cols; ++j) dst[j] = u.apply(dst[j], t[r * kNr + j]);
    }
  }
};

// The epilogue of C^T = op(B) A^T: C(i, j) = base + t, t the chain of C^T(j, i), base =
// bias[j] (bias not null), else beta * C(i, j) (nothing when beta is 0): bitwise what the
// direct product's BiasEpi or StoreEpi writes.
struct TransposedOut {
  float* c;
  int ldc;
  float beta;
  const float* bias;
  __m256 base(int i, int j) const {  // 8 floats of row i from column j
    if (bias != nullptr) return _mm256_loadu_ps(bias + j);
    if (beta == 0.0f) return _mm256_setzero_ps();
    const __m256 d = _mm256_loadu_ps(c + ptrdiff_t(i) * ldc + j);
    return beta == 1.0f ? d : _mm256_mul_ps(_mm256_set1_ps(beta), d);
  }
  void put(int i, int j, float t) const {
    float* dst = c + ptrdiff_t(i) * ldc + j;
    if (bias != nullptr) {
      *dst = bias[j] + t;
    } else if (beta == 0.0f) {
      *dst = t;
    } else if (beta == 1.0f) {
      *dst = *dst + t;
    } else {
      *dst = beta * *dst + t;
    }
  }
};

// Floats of packed x^T per chunk in the transposed product: 256 KiB, half of L2.
constexpr int kTransposedChunkFloats = 64 * 1024;
// C^T tiles are gathered in a stage of kStageRows rows (8 tiles: 48 columns of C, three
// cache lines of each C row) by up to kStageCols columns (C rows), then written to C
// through 8 x 8 register transposes, each C row's lines whole and at once. Written tile
// by tile instead, a C whose rows lie 4 KiB apart sent every tile's 32 rows to one L1 set.
constexpr int kStageRows = 8 * kMr;
constexpr int kStageCols = 64;

// Writes stage rows [0, rows) x columns [0, cols) to C: stage element (r, q), the chain of
// C^T(j0 + r, i0 + q), becomes C(i0 + q, j0 + r).
void flush_stage(const float* stage, int rows, int cols, int i0, int j0, const TransposedOut& out) {
  for (int ib = 0; ib < cols; ib += 8) {
    for (int jb = 0; jb < rows; jb += 8) {
      if (ib + 8 <= cols && jb + 8 <= rows) {
        __m256 v[8];
        for (int q = 0; q < 8; ++q) v[q] = _mm256_load_ps(stage + (jb + q) * kStageCols + ib);
        transpose8(v);  // v[q]: C row i0 + ib + q, columns j0 + jb ..
        for (int q = 0; q < 8; ++q) {
          const int i = i0 + ib + q, j = j0 + jb;
          _mm256_storeu_ps(out.c + ptrdiff_t(i) * out.ldc + j, _mm256_add_ps(out.base(i, j), v[q]));
        }
      } else {
        for (int q = ib; q < std::min(cols, ib + 8); ++q) {
          for (int r = jb; r < std::min(rows, jb + 8); ++r) {
            out.put(i0 + q, j0 + r, stage[r * kStageCols + q]);
          }
        }
      }
    }
  }
}

// x W^T with few rows x as C^T = W x^T: P = W (n, k) read where it lies (its rows run along
// k; the next tile's rows prefetched), Q = x^T packed (the small operand), C written
// transposed through a stage. Each C element is the same in-order FMA chain as the direct
// product's.
void transposed_product(int m, int n, int k, const float* a, int lda, const float* b, int ldb,
                        const TransposedOut& out) {
  alignas(64) float stage[kStageRows * kStageCols];
  const int chunk = std::max(1, kTransposedChunkFloats / (kNr * k));
  Operands o{b, ldb, 1, nullptr, panel_stride(k), k};
  float* panels = scratch(0, size_t(chunk) * o.q_panel);
  for (int c0 = 0; c0 < m; c0 += chunk * kNr) {
    const int c1 = std::min(m, c0 + chunk * kNr);
    pack_panels_transposed(a, lda, k, c0, c1 - c0, panels);
    o.q = panels - ptrdiff_t(c0 / kNr) * o.q_panel;
    for (int g0 = 0; g0 < n; g0 += kStageRows) {
      const int g1 = std::min(n, g0 + kStageRows);
      for (int s0 = c0; s0 < c1; s0 += kStageCols) {
        const int s1 = std::min(c1, s0 + kStageCols);
        for (int r0 = g0; r0 < g1; r0 += kMr) {
          const int mr = std::min(kMr, g1 - r0);
          // The next tile's rows: this group's, or after its last stage the next group's.
          const int next = r0 + kMr < g1 ? r0 + kMr : (s1 == c1 ? g1 : n);
          prefetch_tile_rows(o, next, std::min(kMr, n - next));
          float* st = stage + (r0 - g0) * kStageCols;  // C row j0 in stage column j0 - s0
          for (int j0 = s0; j0 < s1; j0 += kNr) {
            if (kPairs && j0 + kNr < s1) {
              micro_tile_pair<true>(o, r0, mr, j0, [&](int r, int h, __m256 lo, __m256 hi) {
                float* dst = st + r * kStageCols + (j0 - s0) + h * kNr;
                _mm256_store_ps(dst, lo);
                _mm256_store_ps(dst + 8, hi);
              });
              j0 += kNr;
            } else {
              micro_tile<true>(o, r0, mr, j0, [&](int r, __m256 lo, __m256 hi) {
                float* dst = st + r * kStageCols + (j0 - s0);
                _mm256_store_ps(dst, lo);
                _mm256_store_ps(dst + 8, hi);
              });
            }
          }
        }
        flush_stage(stage, g1 - g0, s1 - s0, s0, g0, out);
      }
    }
  }
}

}  // namespace

void sgemm_bias(bool trans_b, int m, int n, int k, const float* a, int lda, const float* b, int ldb,
                const float* bias, float* c, int ldc) {
  if (trans_b && m <= n) return transposed_product(m, n, k, a, lda, b, ldb, {c, ldc, 1.0f, bias});
  run<true>({a, lda, 1, nullptr, 0, k}, m, n, {b, ldb, trans_b}, column_chunk(k), false,
            BiasEpi{c, ldc, bias});
}

void sgemm(bool trans_a, bool trans_b, int m, int n, int k, const float* a, int lda, const float* b,
           int ldb, float beta, float* c, int ldc) {
  const StoreEpi store{c, ldc, beta};
  const QSource q{b, ldb, trans_b};
  if (!trans_a && trans_b && m <= n) {
    transposed_product(m, n, k, a, lda, b, ldb, {c, ldc, beta, nullptr});
  } else if (!trans_a) {  // P = A (m, k) where it lies
    run<true>({a, lda, 1, nullptr, 0, k}, m, n, q, column_chunk(k), false, store);
  } else {  // P = A^T, A stored (k, m): packed into tiles; C a weight gradient, rows outer
    run<false>({pack_tiles(a, lda, m, k), k, kMr, nullptr, 0, k}, m, n, q, kWidePanels, true,
               store);
  }
}

void sgemm_sgd(bool trans_a, bool trans_b, int m, int n, int k, const float* a, int lda,
               const float* b, int ldb, const SgdUpdate& u, float* w, int ldw) {
  // As sgemm's direct products (never the transposed one: the same chains either way).
  const SgdEpi epi{w, ldw, u};
  const QSource q{b, ldb, trans_b};
  if (!trans_a) {
    run<true>({a, lda, 1, nullptr, 0, k}, m, n, q, column_chunk(k), false, epi);
  } else {
    run<false>({pack_tiles(a, lda, m, k), k, kMr, nullptr, 0, k}, m, n, q, kWidePanels, true, epi);
  }
}

}  // namespace dtsim::model::avx2
#endif
