// Eigen against OpenBLAS (CBLAS, one thread) on the five GEMMs of one MLP block step
// (D = 256, H = 1024) at batch 64 (N = 1) and 16 (N = 4's micro-batch), each whole and cut
// into the 32-row blocks of model/parallel.h (dW: blocks of 32 output rows). Prints GFLOP/s.
//
//   fwd1   Y (B, H) = X (B, D) W1^T        fwd2   Y (B, D) = A (B, H) W2^T
//   dx2    dA (B, H) += dY (B, D) W2       dw2    dW2 (D, H) += dY^T A
//   dw1    dW1 (H, D) += dP^T (H, B) X (B, D)
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <Eigen/Core>
#include <algorithm>
#include <vector>

#include "model/parallel.h"

namespace {

using MatR = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Map = Eigen::Map<MatR>;
using CMap = Eigen::Map<const MatR>;

constexpr int kD = 256, kH = 1024;

// C (m, n) = beta C + op(A) op(B), row-major, with op(A) (m, k).
struct Gemm {
  bool ta, tb, accumulate;
  int m, n, k;
  int lda, ldb;  // leading dimensions of A and B as stored
};

void eigen_gemm(const Gemm& g, const float* a, const float* b, float* c) {
  const CMap A(a, g.ta ? g.k : g.m, g.lda), B(b, g.tb ? g.n : g.k, g.ldb);
  Map C(c, g.m, g.n);
  auto run = [&](const auto& lhs, const auto& rhs) {
    if (g.accumulate) {
      C.noalias() += lhs * rhs;
    } else {
      C.noalias() = lhs * rhs;
    }
  };
  if (g.ta && g.tb) run(A.transpose(), B.transpose());
  if (g.ta && !g.tb) run(A.transpose(), B);
  if (!g.ta && g.tb) run(A, B.transpose());
  if (!g.ta && !g.tb) run(A, B);
}

void blas_gemm(const Gemm& g, const float* a, const float* b, float* c) {
  cblas_sgemm(CblasRowMajor, g.ta ? CblasTrans : CblasNoTrans, g.tb ? CblasTrans : CblasNoTrans,
              g.m, g.n, g.k, 1.0f, a, g.lda, b, g.ldb, g.accumulate ? 1.0f : 0.0f, c, g.n);
}

// The five GEMMs at batch B: (A, B, C, shape) with row blocks of C along m.
struct Case {
  const char* name;
  Gemm g;
};

std::vector<Case> cases(int B) {
  return {{"fwd1", {false, true, false, B, kH, kD, kD, kD}},
          {"fwd2", {false, true, false, B, kD, kH, kH, kH}},
          {"dx2", {false, false, true, B, kH, kD, kD, kH}},
          {"dw2", {true, false, true, kD, kH, B, kD, kH}},
          {"dw1", {true, false, true, kH, kD, B, kH, kD}}};
}

template <bool kBlas>
void bm_gemm(benchmark::State& state, Gemm g, bool blocked) {
  const size_t rows_a = g.ta ? g.k : g.m, rows_b = g.tb ? g.n : g.k;
  std::vector<float> a(rows_a * g.lda, 0.5f), b(rows_b * g.ldb, 0.25f), c(size_t(g.m) * g.n);
  auto call = [&](int r0, int r1) {
    Gemm s = g;
    s.m = r1 - r0;
    // Row block r0 of C: rows r0.. of op(A), i.e. columns r0.. of A when transposed.
    const float* a0 = g.ta ? a.data() + r0 : a.data() + size_t(r0) * g.lda;
    if (kBlas) {
      blas_gemm(s, a0, b.data(), c.data() + size_t(r0) * g.n);
    } else if (g.ta) {  // Eigen: a column slice of a row-major A, via an outer-stride map
      const Eigen::Map<const MatR, 0, Eigen::OuterStride<>> A(a0, g.k, s.m,
                                                              Eigen::OuterStride<>(g.lda));
      const CMap Bm(b.data(), g.k, g.ldb);
      Map C(c.data() + size_t(r0) * g.n, s.m, g.n);
      C.noalias() += A.transpose() * Bm;
    } else {
      eigen_gemm(s, a0, b.data(), c.data() + size_t(r0) * g.n);
    }
  };
  for (auto _ : state) {
    if (blocked) {
      for (int r0 = 0; r0 < g.m; r0 += dtsim::model::kRowBlock) {
        call(r0, std::min(g.m, r0 + dtsim::model::kRowBlock));
      }
    } else {
      call(0, g.m);
    }
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOPs"] = benchmark::Counter(2.0 * g.m * g.n * g.k * state.iterations(),
                                                benchmark::Counter::kIsRate);
}

void register_all() {
  for (int B : {64, 16}) {
    for (const Case& c : cases(B)) {
      for (bool blocked : {false, true}) {
        const std::string suffix = std::string("/B:") + std::to_string(B) + "/" +
                                   c.name + (blocked ? "/blocked32" : "/whole");
        benchmark::RegisterBenchmark(("eigen" + suffix).c_str(), bm_gemm<false>, c.g, blocked)
            ->Unit(benchmark::kMicrosecond);
        benchmark::RegisterBenchmark(("openblas" + suffix).c_str(), bm_gemm<true>, c.g, blocked)
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  openblas_set_num_threads(1);
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
