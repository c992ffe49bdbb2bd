// The transposed product behind the AVX2/FMA GEMM (model/gemm_avx2.cc), internal to it:
// x W^T with few rows of x computed as C^T = W x^T, W read where it lies. Thread safety:
// any number of threads may call concurrently on disjoint outputs (the stage is on the
// stack, the packed x^T in the thread's scratch).
#pragma once

#include "model/gemm_avx2.h"

#if DTSIM_GEMM_AVX2
#include <immintrin.h>

#include <cstddef>

namespace dtsim::model::avx2 {

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

// x W^T with few rows x as C^T = W x^T: P = W (n, k) read where it lies (its rows run along
// k; the next tile's rows prefetched), Q = x^T packed (the small operand), C written
// transposed through a stage. Each C element is the same in-order FMA chain as the direct
// product's.
void transposed_product(int m, int n, int k, const float* a, int lda, const float* b, int ldb,
                        const TransposedOut& out);

}  // namespace dtsim::model::avx2
#endif
