// The register-blocked AVX2/FMA GEMM behind model/gemm.h, compiled when the compiler
// targets AVX2 and FMA (DTSIM_NATIVE=ON on such a machine: -march=native) unless CMake's
// DTSIM_OWN_GEMM is OFF; DTSIM_GEMM_AVX2 then is 1 (and DTSIM_GEMM_AVX512 with AVX-512).
//
// Every C element is one chain of fused multiply-adds over k = 0, 1, ..., K-1 in order,
// started from zero, in one SIMD lane: its bits depend on its row of op(A) and column of
// op(B) alone, never on the tiling, the slicing into calls, the thread or the shape's edges.
// The chain then meets beta * C once. A scalar std::fma chain in the same
// order gives the same bits (tests/model/gemm_test.cc checks both against double).
//
// A (the broadcast side, a batch of rows) is read where it lies; A^T of A^T * B (the
// batch-long gradient side of a weight gradient) is copied into 6-row tiles. B is copied
// into 16-column panels (transposed in 8 x 8 register blocks for B^T), a few at a time,
// into a per-thread buffer (grown once, kept). An x W^T with no more rows of x than of W
// (the forward) runs as C^T = W x^T instead: W, the broadcast side, read where it lies
// with the next tile's rows prefetched, x^T packed, and C^T gathered 48 rows at a time in
// a stack buffer, then written to C through 8 x 8 register transposes. Thread safety: any
// number of threads may call concurrently on disjoint outputs.
#pragma once

#if defined(__AVX2__) && defined(__FMA__) && !defined(DTSIM_NO_OWN_GEMM)
#define DTSIM_GEMM_AVX2 1
#else
#define DTSIM_GEMM_AVX2 0
#endif
// Where the compiler targets AVX-512 (F and DQ) too, the kernel computes two 16-column
// panels at once in 16-lane registers: the same FMA chains, so the same bits.
#if DTSIM_GEMM_AVX2 && defined(__AVX512F__) && defined(__AVX512DQ__)
#define DTSIM_GEMM_AVX512 1
#else
#define DTSIM_GEMM_AVX512 0
#endif

#if DTSIM_GEMM_AVX2
#include "model/sgd_update.h"

namespace dtsim::model::avx2 {

// C (m, n) = beta * C + op(A) * op(B), as model::sgemm; not for trans_a && trans_b.
void sgemm(bool trans_a, bool trans_b, int m, int n, int k, const float* a, int lda, const float* b,
           int ldb, float beta, float* c, int ldc);
// C (m, n) = bias + A * op(B), as model::sgemm_bias.
void sgemm_bias(bool trans_b, int m, int n, int k, const float* a, int lda, const float* b, int ldb,
                const float* bias, float* c, int ldc);
// C (m, n) = (A * B) ⊙ S, as model::sgemm_scaled.
void sgemm_scaled(int m, int n, int k, const float* a, int lda, const float* b, int ldb,
                  const float* s, float* c, int ldc);
// W (m, n) = SGD of W by op(A) * op(B), as model::sgemm_sgd.
void sgemm_sgd(bool trans_a, bool trans_b, int m, int n, int k, const float* a, int lda,
               const float* b, int ldb, const SgdUpdate& u, float* w, int ldw);
}  // namespace dtsim::model::avx2
#endif
