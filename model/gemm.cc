#include "model/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <cstddef>

#include "model/gelu_pack.h"
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

// Calls fn(j, count) over a row's n columns in gelu_pack::Pack-sized steps.
template <class Fn>
void for_row_packs(int n, Fn&& fn) {
  for (int j = 0; j < n; j += gelu_pack::kPack) fn(j, std::min(gelu_pack::kPack, n - j));
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

void sgemm_nt_bias_gelu(int m, int n, int k, const float* a, int lda, const float* b, int ldb,
                        const float* bias, float* pre, float* hid, int ldc) {
  if (m == 0 || n == 0) return;
#if DTSIM_GEMM_AVX2
  if (k > 0) {
    avx2::sgemm_nt_bias_gelu(m, n, k, a, lda, b, ldb, bias, pre, hid, ldc);
    return;
  }
#endif
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) pre[size_t(i) * ldc + j] = bias != nullptr ? bias[j] : 0.0f;
  }
  sgemm(false, true, m, n, k, a, lda, b, ldb, 1.0f, pre, ldc);
  for (int i = 0; i < m; ++i) {
    const float* p = pre + size_t(i) * ldc;
    float* h = hid + size_t(i) * ldc;
    for_row_packs(n, [&](int j, int c) {
      gelu_pack::store(gelu_pack::gelu(gelu_pack::load(p + j, c)), h + j, c);
    });
  }
}

void sgemm_nn_gelu_grad(int m, int n, int k, const float* a, int lda, const float* b, int ldb,
                        const float* pre, float* dpre, int ldc) {
  if (m == 0 || n == 0) return;
#if DTSIM_GEMM_AVX2
  if (k > 0) {
    avx2::sgemm_nn_gelu_grad(m, n, k, a, lda, b, ldb, pre, dpre, ldc);
    return;
  }
#endif
  sgemm(false, false, m, n, k, a, lda, b, ldb, 0.0f, dpre, ldc);  // dh, in place
  for (int i = 0; i < m; ++i) {
    const float* p = pre + size_t(i) * ldc;
    float* d = dpre + size_t(i) * ldc;
    for_row_packs(n, [&](int j, int c) {
      const gelu_pack::Pack g = gelu_pack::load(d + j, c);
      gelu_pack::store(gelu_pack::gelu_grad(gelu_pack::load(p + j, c), g), d + j, c);
    });
  }
}

const char* gemm_backend() { return DTSIM_GEMM_AVX2 ? "avx2-fma" : "openblas"; }

}  // namespace dtsim::model
