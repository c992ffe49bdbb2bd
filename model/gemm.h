// Single-precision GEMM on row-major buffers, one BLAS thread per call (OpenBLAS through
// CBLAS; measured faster than Eigen on the model's shapes, bench/RESULTS.md "GEMM").
//
// Contract: C (m, n) = beta * C + op(A) (m, k) * op(B) (k, n), op(X) = X or X^T as
// asked; A is stored (m, k) with leading dimension lda (or (k, m) when transposed), B (k, n)
// with ldb (or (n, k)), C with ldc. For a given shape, leading dimensions and inputs the
// result is bitwise the same on every call and from every thread (OpenBLAS runs its
// single-threaded driver: the library is pinned to one thread before the first call).
// Thread safety: any number of threads may call sgemm concurrently on disjoint C.
// No allocation per call (OpenBLAS reuses its per-call buffers from a pool).
#pragma once

namespace dtsim::model {

void sgemm(bool trans_a, bool trans_b, int m, int n, int k, const float* a, int lda, const float* b,
           int ldb, float beta, float* c, int ldc);

}  // namespace dtsim::model
