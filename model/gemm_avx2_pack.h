// Operand packing behind the AVX2/FMA GEMM (model/gemm_avx2.cc; also model/attention.cc): the
// micro-tile's shape, a per-thread scratch buffer, the vector operand Q copied into
// kNr-column panels (from Q or from Q^T) and the transposed broadcast operand A^T copied
// into kMr-row tiles. Packing copies floats and never changes them, so it has no say in
// the GEMM's bits. Thread safety: any number of threads (the scratch is per thread).
#pragma once

#include "model/gemm_avx2.h"

#if DTSIM_GEMM_AVX2
#include <immintrin.h>

#include <cstddef>

namespace dtsim::model::avx2 {

// A micro-tile is kMr rows of the broadcast operand P by kNr columns of the vector
// operand Q: 12 accumulators of 8 lanes, two vector loads and six broadcasts per k step.
constexpr int kMr = 6;
constexpr int kNr = 16;

// r[i] = column i of the 8 x 8 block whose rows r[0 .. 7] were.
inline void transpose8(__m256 r[8]) {
  __m256 u[8];
  for (int i = 0; i < 8; i += 2) {
    u[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    u[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(u[i], u[i + 2], 0x44);
    r[i + 1] = _mm256_shuffle_ps(u[i], u[i + 2], 0xee);
    r[i + 2] = _mm256_shuffle_ps(u[i + 1], u[i + 3], 0x44);
    r[i + 3] = _mm256_shuffle_ps(u[i + 1], u[i + 3], 0xee);
  }
  for (int i = 0; i < 4; ++i) {
    u[i] = _mm256_permute2f128_ps(r[i], r[i + 4], 0x20);
    u[i + 4] = _mm256_permute2f128_ps(r[i], r[i + 4], 0x31);
  }
  for (int i = 0; i < 8; ++i) r[i] = u[i];
}

// A per-thread buffer of at least n floats, 64-byte aligned; `slot` (0 or 1) tells the
// buffers of one call apart. Grown when a larger shape comes, never shrunk.
float* scratch(int slot, size_t n);

// Floats from one packed panel of k rows to the next: k * kNr, plus one cache line when
// that is a whole number of 4 KiB, so that the same row of consecutive panels falls in
// different L1 sets (without it, packing a row of 64 panels wrote 64 lines to one set).
inline ptrdiff_t panel_stride(int k) {
  const ptrdiff_t n = ptrdiff_t(k) * kNr;
  return n % 1024 == 0 ? n + kNr : n;
}

// Columns j0 .. j0 + cols - 1 of the (k, *) array src (row stride ld) as kNr-column
// panels of k rows of kNr floats into out, panel_stride(k) apart, zero beyond cols.
void pack_panels(const float* src, ptrdiff_t ld, int k, int j0, int cols, float* out);
// The same panels from a transposed source: Q(k, j) = src[j * ld + k].
void pack_panels_transposed(const float* src, ptrdiff_t ld, int k, int j0, int cols, float* out);
// A^T of A (k, m) (row stride lda) as kMr-row tiles in scratch(1), kMr floats per k step
// (pack_tiles' layout in Operands, gemm_avx2.cc). Returns the tiles.
const float* pack_tiles(const float* a, int lda, int m, int k);

}  // namespace dtsim::model::avx2
#endif
