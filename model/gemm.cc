#include "model/gemm.h"

#include <cblas.h>

#include <cstddef>

namespace dtsim::model {
namespace {

// One BLAS thread, fixed once before the first GEMM: parallelism comes from the callers
// (rank threads, oneTBB blocks of model/parallel.h), and a BLAS that split a GEMM by its
// own thread count could change how it sums.
bool pin_one_blas_thread() {
  openblas_set_num_threads(1);
  return true;
}

}  // namespace

void sgemm(bool trans_a, bool trans_b, int m, int n, int k, const float* a, int lda, const float* b,
           int ldb, float beta, float* c, int ldc) {
  static const bool pinned = pin_one_blas_thread();
  (void)pinned;
  if (m == 0 || n == 0) return;
  if (k == 0) {  // no product: C = beta * C (CBLAS would reject a zero leading dimension)
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < n; ++j)
        c[size_t(i) * ldc + j] = beta == 0.0f ? 0.0f : beta * c[size_t(i) * ldc + j];
    }
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace dtsim::model
