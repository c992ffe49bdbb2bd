// Single-precision GEMM on row-major buffers.
//
// Built for a machine with AVX2 and FMA (DTSIM_NATIVE=ON on such a machine), the GEMMs run
// dtsim's register-blocked kernel (model/gemm_avx2.h): each C element is one in-order FMA
// chain over k, so its bits do not depend on how the product is cut into calls or tiles.
// Otherwise they call OpenBLAS through CBLAS, pinned to one BLAS thread before the first
// call; the A^T * B^T case always does. Measurements: bench/compute_results.md.
//
// Contract: C (m, n) = beta * C + op(A) (m, k) * op(B) (k, n), op(X) = X or X^T as
// asked; A is stored (m, k) with leading dimension lda (or (k, m) when transposed), B (k, n)
// with ldb (or (n, k)), C with ldc. For a given shape, leading dimensions and inputs the
// result is bitwise the same on every call and from every thread.
// Thread safety: any number of threads may call concurrently on disjoint outputs.
// No allocation per call (buffers are per thread, grown once and kept).
#pragma once

#include "model/sgd_update.h"

namespace dtsim::model {

void sgemm(bool trans_a, bool trans_b, int m, int n, int k, const float* a, int lda, const float* b,
           int ldb, float beta, float* c, int ldc);

// C (m, n) = bias + A (m, k) * op(B) (k, n), bias (n) added to every row: bitwise sgemm
// with beta 1 onto C's rows set to the bias, without writing and reading them. Contract,
// thread safety and allocation as sgemm.
void sgemm_bias(bool trans_b, int m, int n, int k, const float* a, int lda, const float* b, int ldb,
                const float* bias, float* c, int ldc);

// C (m, n) = (A (m, k) * B (k, n)) ⊙ S, S (m, n) with leading dimension ldc like C: each
// element 0 + g * s, g bitwise what sgemm with beta 0 writes (so a -0 product reads +0).
// Neither operand transposed. Thread safety and allocation as sgemm.
void sgemm_scaled(int m, int n, int k, const float* a, int lda, const float* b, int ldb,
                  const float* s, float* c, int ldc);

// W (m, n) = SGD of W by the gradient op(A) (m, k) * op(B) (k, n), which is never stored:
// each element u.apply(w, g), g bitwise what sgemm with beta 0 writes for that element.
// Leading dimensions as sgemm (ldw for W). Thread safety and allocation as sgemm.
void sgemm_sgd(bool trans_a, bool trans_b, int m, int n, int k, const float* a, int lda,
               const float* b, int ldb, const SgdUpdate& u, float* w, int ldw);

// "avx512-fma" or "avx2-fma" (dtsim's kernel, the same bits) or "openblas": what this
// build's GEMMs run.
const char* gemm_backend();

// True when every C element's bits depend only on its row of op(A), its column of op(B) and
// its old value (not on m, n or how C is cut into calls), for all but A^T * B^T: dtsim's
// kernel promises it, OpenBLAS does not (it may take other paths for other shapes).
bool gemm_bits_shape_independent();

}  // namespace dtsim::model
