#include "model/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <cstddef>
#include <vector>

#include "model/gemm_avx2.h"

namespace dtsim::model {
namespace {

// One BLAS thread, fixed once before the first GEMM: parallelism comes from the callers
// (rank threads, oneTBB blocks of model/parallel.h), and a BLAS that split a GEMM by its
// own thread count could change how it sums.
bool pin_one_blas_thread() {
  openblas_set_num_threads(1);
  return true;
}

void blas_sgemm(bool trans_a, bool trans_b, int m, int n, int k, const float* a, int lda,
                const float* b, int ldb, float beta, float* c, int ldc) {
  static const bool pinned = pin_one_blas_thread();
  (void)pinned;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace

void sgemm(bool trans_a, bool trans_b, int m, int n, int k, const float* a, int lda, const float* b,
           int ldb, float beta, float* c, int ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // no product: C = beta * C (CBLAS would reject a zero leading dimension)
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < n; ++j)
        c[size_t(i) * ldc + j] = beta == 0.0f ? 0.0f : beta * c[size_t(i) * ldc + j];
    }
    return;
  }
#if DTSIM_GEMM_AVX2
  if (!(trans_a && trans_b)) {
    avx2::sgemm(trans_a, trans_b, m, n, k, a, lda, b, ldb, beta, c, ldc);
    return;
  }
#endif
  blas_sgemm(trans_a, trans_b, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

void sgemm_bias(bool trans_b, int m, int n, int k, const float* a, int lda, const float* b, int ldb,
                const float* bias, float* c, int ldc) {
#if DTSIM_GEMM_AVX2
  if (m > 0 && n > 0 && k > 0) {
    avx2::sgemm_bias(trans_b, m, n, k, a, lda, b, ldb, bias, c, ldc);
    return;
  }
#endif
  for (int i = 0; i < m; ++i) std::copy(bias, bias + n, c + size_t(i) * ldc);
  sgemm(false, trans_b, m, n, k, a, lda, b, ldb, 1.0f, c, ldc);
}

void sgemm_scaled(int m, int n, int k, const float* a, int lda, const float* b, int ldb,
                  const float* s, float* c, int ldc) {
  if (m == 0 || n == 0) return;
#if DTSIM_GEMM_AVX2
  if (k > 0) {
    avx2::sgemm_scaled(m, n, k, a, lda, b, ldb, s, c, ldc);
    return;
  }
#endif
  sgemm(false, false, m, n, k, a, lda, b, ldb, 0.0f, c, ldc);
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      float& e = c[size_t(i) * ldc + j];
      e = 0.0f + e * s[size_t(i) * ldc + j];
    }
  }
}

void sgemm_sgd(bool trans_a, bool trans_b, int m, int n, int k, const float* a, int lda,
               const float* b, int ldb, const SgdUpdate& u, float* w, int ldw) {
  if (m == 0 || n == 0) return;
#if DTSIM_GEMM_AVX2
  if (k > 0 && !(trans_a && trans_b)) {
    avx2::sgemm_sgd(trans_a, trans_b, m, n, k, a, lda, b, ldb, u, w, ldw);
    return;
  }
#endif
  // The gradient into a per-thread buffer (grown once, kept), then the update.
  thread_local std::vector<float> g;
  if (g.size() < size_t(m) * n) g.resize(size_t(m) * n);
  sgemm(trans_a, trans_b, m, n, k, a, lda, b, ldb, 0.0f, g.data(), n);
  for (int i = 0; i < m; ++i) {
    float* row = w + size_t(i) * ldw;
    for (int j = 0; j < n; ++j) row[j] = u.apply(row[j], g[size_t(i) * n + j]);
  }
}

const char* gemm_backend() {
  return DTSIM_GEMM_AVX512 ? "avx512-fma" : DTSIM_GEMM_AVX2 ? "avx2-fma" : "openblas";
}

bool gemm_bits_shape_independent() { return DTSIM_GEMM_AVX2 != 0; }

}  // namespace dtsim::model
