// The transposed product (model/gemm_avx2_transposed.h).
#include "model/gemm_avx2_transposed.h"

#if DTSIM_GEMM_AVX2
#include <algorithm>

#include "model/gemm_avx2_pack.h"
#include "model/gemm_avx2_tile.h"

namespace dtsim::model::avx2 {
namespace {

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

}  // namespace

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
              float* const at = st + (j0 - s0);  // by value, 16 bytes: see micro_tile
              micro_tile_pair<true>(o, r0, mr, j0,
                                    [at, r0, j0](int row, int col, __m256 lo, __m256 hi) {
                                      float* dst = at + (row - r0) * kStageCols + (col - j0);
                                      _mm256_store_ps(dst, lo);
                                      _mm256_store_ps(dst + 8, hi);
                                    });
              j0 += kNr;
            } else {
              float* const at = st + (j0 - s0);
              micro_tile<true>(o, r0, mr, j0, [at, r0](int row, int, __m256 lo, __m256 hi) {
                float* dst = at + (row - r0) * kStageCols;
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

}  // namespace dtsim::model::avx2
#endif
