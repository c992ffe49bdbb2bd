#include "model/gemm_avx2.h"

#include "model/gemm_avx2_pack.h"
#include "model/gemm_avx2_tile.h"
#include "model/gemm_avx2_transposed.h"

#if DTSIM_GEMM_AVX2
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <type_traits>

namespace dtsim::model::avx2 {
namespace {

// Weight-gradient panels per chunk, rows outer: up to 1024 columns (K = 64: 256 KiB).
constexpr int kWidePanels = 64;

// Q as stored: Q(k, j) at src[k * ld + j], or at src[j * ld + k] when transposed (the
// weight (out, in) of an x W^T product).
struct QSource {
  const float* src;
  ptrdiff_t ld;
  bool transposed;
};

// An epilogue's whole-tile entry points, handed to the micro-kernels by value: a row's 16
// sums as two 8-lane halves, or (AVX-512) as one 16-lane register.
template <class Epi>
struct Direct {
  Epi e;
  void operator()(int row, int col, __m256 lo, __m256 hi) const { e.direct(row, col, lo, hi); }
#if DTSIM_GEMM_AVX512
  void operator()(int row, int col, __m512 v) const { e.direct(row, col, v); }
#endif
};

// Runs every tile of P (rows, K) * Q (K, cols) and hands it to epi(r0, rows, j0, cols, t),
// after epi.prefetch(r0, rows, j0) before the tile's product; an Epi with kDirect takes
// whole tiles row by row from the registers instead, epi.direct(row, j0, lo, hi) (AVX-512:
// epi.direct(row, j0, v), 16 lanes, the same arithmetic lane by lane). Q is
// packed `chunk` panels at a time (pack_panels): a weight's rows lie 1-4 KiB apart, so
// read in place a panel's lines would share a few L1 sets and evict each other. Within a
// chunk, rows_outer keeps a P tile in L1 across Q's panels and walks C along its rows (for
// a C that is a weight gradient: walked by columns, a tile's rows share one L1 set);
// columns outer keeps a Q panel in L1 across P's tiles.
template <bool kUnitK, class Epi>
void run(Operands o, int rows, int cols, const QSource& q, int chunk, bool rows_outer, Epi&& epi) {
  alignas(64) float t[2 * kMr * kNr];  // a partial tile (pair: the second panel's at kMr * kNr)
  // The closures below capture by value, built once here where they can be (micro_tile in
  // gemm_avx2_tile.h says why).
  const std::remove_cvref_t<Epi> e = epi;
  const Direct<std::remove_cvref_t<Epi>> direct{e};
  float* const tp = t;
  auto tile = [&](int r0, int j0) {
    const int mr = std::min(kMr, rows - r0), nc = std::min(kNr, cols - j0);
    e.prefetch(r0, mr, j0);  // what the epilogue reads arrives while the tile computes
    if constexpr (std::remove_cvref_t<Epi>::kDirect) {
      if (nc == kNr) {  // a whole tile: straight from the registers
        micro_tile<kUnitK>(o, r0, mr, j0, direct);
        return;
      }
    }
    micro_tile<kUnitK>(o, r0, mr, j0, [tp, r0](int row, int, __m256 lo, __m256 hi) {
      _mm256_store_ps(tp + (row - r0) * kNr, lo);
      _mm256_store_ps(tp + (row - r0) * kNr + 8, hi);
    });
    e(r0, mr, j0, nc, t);
  };
  // Panels j0 and j0 + kNr (both packed; the second may be partial) in one pass.
  auto tile_pair = [&](int r0, int j0) {
    const int mr = std::min(kMr, rows - r0), nc = std::min(kNr, cols - j0 - kNr);
    e.prefetch(r0, mr, j0);
    e.prefetch(r0, mr, j0 + kNr);
    if constexpr (std::remove_cvref_t<Epi>::kDirect) {
      if (nc == kNr) {
        micro_tile_pair<kUnitK>(o, r0, mr, j0, direct);
        return;
      }
    }
    micro_tile_pair<kUnitK>(o, r0, mr, j0, [tp, r0, j0](int row, int col, __m256 lo, __m256 hi) {
      float* dst = tp + (col == j0 ? 0 : kMr * kNr) + (row - r0) * kNr;
      _mm256_store_ps(dst, lo);
      _mm256_store_ps(dst + 8, hi);
    });
    e(r0, mr, j0, kNr, t);
    e(r0, mr, j0 + kNr, nc, t + kMr * kNr);
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
#if DTSIM_GEMM_AVX512
  void direct(int row, int j0, __m512 v) const {
    float* dst = c + ptrdiff_t(row) * ldc + j0;
    if (beta == 1.0f) {
      v = _mm512_add_ps(_mm512_loadu_ps(dst), v);
    } else if (beta != 0.0f) {
      v = _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(beta), _mm512_loadu_ps(dst)), v);
    }
    _mm512_storeu_ps(dst, v);
  }
#endif
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
#if DTSIM_GEMM_AVX512
  void direct(int row, int j0, __m512 v) const {
    _mm512_storeu_ps(c + ptrdiff_t(row) * ldc + j0, _mm512_add_ps(_mm512_loadu_ps(bias + j0), v));
  }
#endif
  void operator()(int r0, int rows, int j0, int cols, const float* t) const {
    for (int r = 0; r < rows; ++r) {
      float* dst = c + ptrdiff_t(r0 + r) * ldc + j0;
      for (int j = 0; j < cols; ++j) dst[j] = bias[j0 + j] + t[r * kNr + j];
    }
  }
};

// C = 0 + t * S on the tile, S laid out as C: bitwise StoreEpi with beta 0, then each
// element times S's, +0 added (as model::gelu_grad_from_kept does).
struct ScaleEpi {
  static constexpr bool kDirect = true;
  float* c;
  int ldc;
  const float* s;
  void prefetch(int r0, int rows, int j0) const {
    prefetch_rows<true>(c + ptrdiff_t(r0) * ldc + j0, ldc, rows);
    prefetch_rows<false>(s + ptrdiff_t(r0) * ldc + j0, ldc, rows);
  }
  void direct(int row, int j0, __m256 lo, __m256 hi) const {
    const ptrdiff_t at = ptrdiff_t(row) * ldc + j0;
    const __m256 z = _mm256_setzero_ps();
    _mm256_storeu_ps(c + at, _mm256_add_ps(z, _mm256_mul_ps(lo, _mm256_loadu_ps(s + at))));
    _mm256_storeu_ps(c + at + 8, _mm256_add_ps(z, _mm256_mul_ps(hi, _mm256_loadu_ps(s + at + 8))));
  }
#if DTSIM_GEMM_AVX512
  void direct(int row, int j0, __m512 v) const {
    const ptrdiff_t at = ptrdiff_t(row) * ldc + j0;
    const __m512 prod = _mm512_mul_ps(v, _mm512_loadu_ps(s + at));
    _mm512_storeu_ps(c + at, _mm512_add_ps(_mm512_setzero_ps(), prod));
  }
#endif
  void operator()(int r0, int rows, int j0, int cols, const float* t) const {
    for (int r = 0; r < rows; ++r) {
      const ptrdiff_t at = ptrdiff_t(r0 + r) * ldc + j0;
      for (int j = 0; j < cols; ++j) c[at + j] = 0.0f + t[r * kNr + j] * s[at + j];
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
#if DTSIM_GEMM_AVX512
  __m512 apply(__m512 w, __m512 g) const {
    const __m512 step = _mm512_add_ps(g, _mm512_mul_ps(_mm512_set1_ps(u.weight_decay), w));
    return _mm512_sub_ps(w, _mm512_mul_ps(_mm512_set1_ps(u.lr), step));
  }
  void direct(int row, int j0, __m512 g) const {
    float* dst = c + ptrdiff_t(row) * ldc + j0;
    _mm512_storeu_ps(dst, apply(_mm512_loadu_ps(dst), g));
  }
#endif
  void operator()(int r0, int rows, int j0, int cols, const float* t) const {
    for (int r = 0; r < rows; ++r) {
      float* dst = c + ptrdiff_t(r0 + r) * ldc + j0;
      for (int j = 0; j < cols; ++j) dst[j] = u.apply(dst[j], t[r * kNr + j]);
    }
  }
};

// C (m, n) = op(A) * op(B) through `epi`, P = op(A) and Q = op(B) packed in panels (not
// for trans_a && trans_b). A untransposed is read where it lies, columns outer; A^T is
// packed into tiles, rows outer (C a weight gradient).
template <class Epi>
void direct_product(bool trans_a, bool trans_b, int m, int n, int k, const float* a, int lda,
                    const float* b, int ldb, const Epi& epi) {
  const QSource q{b, ldb, trans_b};
  if (!trans_a) {
    run<true>({a, lda, 1, nullptr, 0, k}, m, n, q, column_chunk(k), false, epi);
  } else {
    run<false>({pack_tiles(a, lda, m, k), k, kMr, nullptr, 0, k}, m, n, q, kWidePanels, true, epi);
  }
}

// Whether x W^T (m rows of x, n of W) runs as the transposed product C^T = W x^T: with no
// more rows of x than of W (the forward), or when W has fewer rows than a panel's columns
// and x at least as many (a narrow head: the direct product would fill a quarter of its
// lanes with padding, the transposed one none).
bool transposed_pays(int m, int n) { return m <= n || (n < kNr && m >= kNr); }

}  // namespace

void sgemm_bias(bool trans_b, int m, int n, int k, const float* a, int lda, const float* b, int ldb,
                const float* bias, float* c, int ldc) {
  if (trans_b && transposed_pays(m, n))
    return transposed_product(m, n, k, a, lda, b, ldb, {c, ldc, 1.0f, bias});
  run<true>({a, lda, 1, nullptr, 0, k}, m, n, {b, ldb, trans_b}, column_chunk(k), false,
            BiasEpi{c, ldc, bias});
}

void sgemm(bool trans_a, bool trans_b, int m, int n, int k, const float* a, int lda, const float* b,
           int ldb, float beta, float* c, int ldc) {
  if (!trans_a && trans_b && transposed_pays(m, n)) {
    transposed_product(m, n, k, a, lda, b, ldb, {c, ldc, beta, nullptr});
  } else {
    direct_product(trans_a, trans_b, m, n, k, a, lda, b, ldb, StoreEpi{c, ldc, beta});
  }
}

void sgemm_scaled(int m, int n, int k, const float* a, int lda, const float* b, int ldb,
                  const float* s, float* c, int ldc) {
  direct_product(false, false, m, n, k, a, lda, b, ldb, ScaleEpi{c, ldc, s});
}

void sgemm_sgd(bool trans_a, bool trans_b, int m, int n, int k, const float* a, int lda,
               const float* b, int ldb, const SgdUpdate& u, float* w, int ldw) {
  // Never the transposed product: the direct one gives the same chains.
  direct_product(trans_a, trans_b, m, n, k, a, lda, b, ldb, SgdEpi{w, ldw, u});
}

}  // namespace dtsim::model::avx2
#endif
