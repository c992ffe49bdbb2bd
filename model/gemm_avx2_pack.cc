// Operand packing for the AVX2/FMA GEMM (model/gemm_avx2_pack.h).
#include "model/gemm_avx2_pack.h"

#if DTSIM_GEMM_AVX2
#include <algorithm>
#include <cstdint>
#include <memory>

namespace dtsim::model::avx2 {

float* scratch(int slot, size_t n) {
  struct Buf {
    std::unique_ptr<float[]> mem;
    size_t cap = 0;
  };
  thread_local Buf bufs[2];
  Buf& b = bufs[slot];
  if (b.cap < n + 16) {
    b.mem = std::make_unique<float[]>(n + 16);
    b.cap = n + 16;
  }
  float* m = b.mem.get();
  return m + (16 - (reinterpret_cast<uintptr_t>(m) / sizeof(float)) % 16) % 16;
}

// Columns j0 .. j0 + cols - 1 of the (k, *) array src (row stride ld) as consecutive
// kNr-column panels of k rows of kNr floats, zero beyond cols. Each row is read as one run
// of up to 64 bytes per panel: a weight's rows lie 1-4 KiB apart, so each row starts a new
// page for the hardware prefetcher, and a run amortises its first miss.
void pack_panels(const float* src, ptrdiff_t ld, int k, int j0, int cols, float* out) {
  const int panels = (cols + kNr - 1) / kNr;
  const ptrdiff_t stride = panel_stride(k);
  for (int kk = 0; kk < k; ++kk) {
    const float* in = src + kk * ld + j0;
    for (int p = 0; p < panels; ++p) {
      float* row = out + p * stride + ptrdiff_t(kk) * kNr;
      const int nc = std::min(kNr, cols - p * kNr);
      if (nc == kNr) {
        _mm256_storeu_ps(row, _mm256_loadu_ps(in + p * kNr));
        _mm256_storeu_ps(row + 8, _mm256_loadu_ps(in + p * kNr + 8));
      } else {
        for (int j = 0; j < kNr; ++j) row[j] = j < nc ? in[p * kNr + j] : 0.0f;
      }
    }
  }
}

namespace {

// The 8 x 8 block at src (row stride ld) transposed into dst (row stride kNr).
void transpose8x8(const float* src, ptrdiff_t ld, float* dst) {
  __m256 r[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * ld);
  transpose8(r);
  for (int i = 0; i < 8; ++i) _mm256_storeu_ps(dst + i * kNr, r[i]);
}

}  // namespace

// The same panels as pack_panels from a transposed source: Q(k, j) = src[j * ld + k], so
// panel p is rows j0 + 16 p .. of src, each read along k (8 x 8 blocks in registers).
void pack_panels_transposed(const float* src, ptrdiff_t ld, int k, int j0, int cols, float* out) {
  const int panels = (cols + kNr - 1) / kNr;
  for (int p = 0; p < panels; ++p) {
    float* panel = out + p * panel_stride(k);
    const int c0 = j0 + p * kNr, nc = std::min(kNr, cols - p * kNr);
    int kk = 0;
    if (nc == kNr) {
      // Both 8 x 8 blocks of one 64-byte run of 8 rows back to back: rows 4 KiB apart share
      // an L1 set, so 8 rows' lines fit in its 8 ways, 16 would evict each other.
      for (; kk + 16 <= k; kk += 16) {
        for (int h = 0; h < 2; ++h) {
          const float* rows8 = src + (c0 + 8 * h) * ld + kk;
          transpose8x8(rows8, ld, panel + ptrdiff_t(kk) * kNr + 8 * h);
          transpose8x8(rows8 + 8, ld, panel + ptrdiff_t(kk + 8) * kNr + 8 * h);
        }
      }
      for (; kk + 8 <= k; kk += 8) {
        transpose8x8(src + c0 * ld + kk, ld, panel + ptrdiff_t(kk) * kNr);
        transpose8x8(src + (c0 + 8) * ld + kk, ld, panel + ptrdiff_t(kk) * kNr + 8);
      }
    }
    for (; kk < k; ++kk) {
      float* row = panel + ptrdiff_t(kk) * kNr;
      for (int j = 0; j < kNr; ++j) row[j] = j < nc ? src[(c0 + j) * ld + kk] : 0.0f;
    }
  }
}

// A stored (k, m) (P = A^T, P(r, k) = a[k * lda + r]) as kMr-row tiles of k steps of kMr
// floats, zero beyond m: P(r, k) lands at out[(r / kMr) * kMr * k + k * kMr + r % kMr].
// A is read kRows rows at a time along the rows (its rows lie up to 4 KiB apart: read down
// a column, 64 of them would share one L1 set), each tile's share written as one run.
// A step's kMr floats are one load (masked where 8 would pass row m) and one 8-float store
// whose last two lanes the next step overwrites (at the last step, kMr floats exactly: the
// next tile's first step is already written).
const float* pack_tiles(const float* a, int lda, int m, int k) {
  static_assert(kMr == 6);
  constexpr int kRows = 4;
  const int tiles = (m + kMr - 1) / kMr, wide = m >= 8 ? (m - 8) / kMr + 1 : 0;
  const size_t tile_len = size_t(kMr) * k;
  float* out = scratch(1, tiles * tile_len);
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  auto step = [&](const float* in, int r0, bool masked, bool last, float* dst) {
    const __m256 v =
        masked ? _mm256_maskload_ps(in, _mm256_cmpgt_epi32(_mm256_set1_epi32(m - r0), lane))
               : _mm256_loadu_ps(in);
    if (!last) {
      _mm256_storeu_ps(dst, v);
    } else {
      _mm_storeu_ps(dst, _mm256_castps256_ps128(v));
      _mm_storel_pi(reinterpret_cast<__m64*>(dst + 4), _mm256_extractf128_ps(v, 1));
    }
  };
  // Four steps of a tile (24 floats) as three 8-float stores, 32-byte aligned (so none
  // across a line) when k is a multiple of 4, as the model's batch is.
  const __m256i up6 = _mm256_setr_epi32(0, 0, 0, 0, 0, 0, 0, 1);
  const __m256i mid = _mm256_setr_epi32(2, 3, 4, 5, 0, 1, 2, 3);
  const __m256i low = _mm256_setr_epi32(4, 5, 0, 1, 2, 3, 4, 5);
  for (int k0 = 0; k0 < k; k0 += kRows) {
    const int k1 = std::min(k, k0 + kRows);
    for (int t = 0; t < tiles; ++t) {
      const int r0 = t * kMr;
      float* dst = out + t * tile_len + size_t(k0) * kMr;
      const float* in = a + ptrdiff_t(k0) * lda + r0;
      if (k1 - k0 == kRows && t < wide) {
        const __m256 s0 = _mm256_loadu_ps(in), s1 = _mm256_loadu_ps(in + lda);
        const __m256 s2 = _mm256_loadu_ps(in + 2 * lda), s3 = _mm256_loadu_ps(in + 3 * lda);
        const __m256 s2m = _mm256_permutevar8x32_ps(s2, mid);
        _mm256_storeu_ps(dst, _mm256_blend_ps(s0, _mm256_permutevar8x32_ps(s1, up6), 0xc0));
        _mm256_storeu_ps(dst + 8, _mm256_blend_ps(_mm256_permutevar8x32_ps(s1, mid), s2m, 0xf0));
        _mm256_storeu_ps(dst + 16, _mm256_blend_ps(_mm256_permutevar8x32_ps(s2, low),
                                                   _mm256_permutevar8x32_ps(s3, low), 0xfc));
        continue;
      }
      for (int kk = k0; kk < k1; ++kk, in += lda, dst += kMr) {
        step(in, r0, t >= wide, kk + 1 == k, dst);
      }
    }
  }
  return out;
}

}  // namespace dtsim::model::avx2
#endif
