// The register tiles behind the AVX2/FMA GEMM (model/gemm_avx2.cc and
// gemm_avx2_transposed.cc; also model/attention.cc): the operands a tile reads, the
// micro-kernels (6 x 16 on AVX2, 6 x 32 on AVX-512; each C element one in-order FMA chain)
// and the prefetches around them. Thread safety: pure functions of their arguments.
#pragma once

#include "model/gemm_avx2_pack.h"

#if DTSIM_GEMM_AVX2
#include <immintrin.h>

#include <cstddef>

namespace dtsim::model::avx2 {

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

// Computes the (MR, kNr) tile at rows r0, columns j0 and calls out(r0 + r, j0, lo, hi) with
// row r's 16 sums (two vectors). The twelve accumulators are named variables, not an array:
// GCC keeps an array of __m256 on the stack and stores it every step. `out` is taken by
// value and should capture by value: the epilogue's stores (_mm256_storeu_ps) may alias any
// memory, so a closure reached through a reference, or holding references, was reloaded
// from memory after every store (epilogue fields, tile origin: ~15 instructions per store).
// Out gets C's coordinates, so a closure needs nothing of the tile and can be built once
// per product: one over 16 bytes goes by memory, and built per tile (scalar stores, then
// one 32-byte load to pass it) it stalled every call on store forwarding.
template <int MR, bool kUnitK, class Out>
[[gnu::always_inline]] inline void micro(const Operands& o, int r0, int j0, Out out) {
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
  out(r0, j0, c00, c01);
  if constexpr (MR > 1) out(r0 + 1, j0, c10, c11);
  if constexpr (MR > 2) out(r0 + 2, j0, c20, c21);
  if constexpr (MR > 3) out(r0 + 3, j0, c30, c31);
  if constexpr (MR > 4) out(r0 + 4, j0, c40, c41);
  if constexpr (MR > 5) out(r0 + 5, j0, c50, c51);
}

template <bool kUnitK, class Out>
[[gnu::noinline]] void micro_tile(const Operands& o, int r0, int rows, int j0, Out out) {
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
// per element as micro(), so the same bits. out(r0 + r, j0 + 16 h, v) gets row r of panel
// h as one 16-lane register when out takes one (half the epilogue's instructions), else
// out(r0 + r, j0 + 16 h, lo, hi) its two halves.
constexpr bool kPairs = true;

template <int MR, bool kUnitK, class Out>
[[gnu::always_inline]] inline void micro_pair(const Operands& o, int r0, int j0, Out out) {
  constexpr bool kWide = requires(Out f, __m512 v) { f(0, 0, v); };
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
  // A macro, not a lambda: GCC called a [&] lambda here out of line, through references.
#define DTSIM_GEMM_PUT(r)                                                                         \
  if constexpr (MR > r) {                                                                         \
    if constexpr (kWide) {                                                                        \
      out(r0 + r, j0, c##r##0);                                                                   \
      out(r0 + r, j0 + kNr, c##r##1);                                                             \
    } else {                                                                                      \
      out(r0 + r, j0, _mm512_castps512_ps256(c##r##0), _mm512_extractf32x8_ps(c##r##0, 1));       \
      out(r0 + r, j0 + kNr, _mm512_castps512_ps256(c##r##1), _mm512_extractf32x8_ps(c##r##1, 1)); \
    }                                                                                             \
  }
  DTSIM_GEMM_PUT(0)
  DTSIM_GEMM_PUT(1)
  DTSIM_GEMM_PUT(2)
  DTSIM_GEMM_PUT(3)
  DTSIM_GEMM_PUT(4)
  DTSIM_GEMM_PUT(5)
#undef DTSIM_GEMM_PUT
}

template <bool kUnitK, class Out>
[[gnu::noinline]] void micro_tile_pair(const Operands& o, int r0, int rows, int j0, Out out) {
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
void micro_tile_pair(const Operands&, int, int, int, Out) {}
#endif

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
inline void prefetch_tile_rows(const Operands& o, int r0, int rows) {
  for (int r = 0; r < rows; ++r) {
    const float* row = o.p + ptrdiff_t(r0 + r) * o.prs;
    for (int kk = 0; kk < o.k; kk += 16) prefetch_line<false>(row + kk);
    prefetch_line<false>(row + o.k - 1);
  }
}

}  // namespace dtsim::model::avx2
#endif
