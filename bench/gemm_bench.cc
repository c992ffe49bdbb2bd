// Eigen against OpenBLAS (CBLAS, one thread) on the five GEMMs of one MLP block step
// (D = 256, H = 1024) at batch 64 (N = 1) and 16 (N = 4's micro-batch): whole, cut into
// 32-row blocks of C (what dtsim did with Eigen), and cut as model/linear_kernels.cc now does
// (gemm_slice_width slices along C's larger weight dimension). Prints GFLOP/s (CPU time).
//
//   fwd1   Y (B, H) = X (B, D) W1^T        fwd2   Y (B, D) = A (B, H) W2^T
//   dx2    dA (B, H) += dY (B, D) W2       dw2    dW2 (D, H) += dY^T A
//   dw1    dW1 (H, D) += dP^T (H, B) X (B, D)
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <Eigen/Core>
#include <algorithm>
#include <vector>

#include "model/gemm.h"
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

enum class Mode { kWhole, kRows32, kSlices };

template <bool kBlas>
void bm_gemm(benchmark::State& state, Gemm g, Mode mode) {
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
  // Column slice [c0, c1) of C: columns of op(B), i.e. rows of B when transposed.
  auto call_cols = [&](int c0, int c1) {
    Gemm s = g;
    s.n = c1 - c0;
    const float* b0 = g.tb ? b.data() + size_t(c0) * g.ldb : b.data() + c0;
    float* c_0 = c.data() + c0;
    if (kBlas) {
      cblas_sgemm(CblasRowMajor, g.ta ? CblasTrans : CblasNoTrans, g.tb ? CblasTrans : CblasNoTrans,
                  s.m, s.n, s.k, 1.0f, a.data(), g.lda, b0, g.ldb, g.accumulate ? 1.0f : 0.0f, c_0,
                  g.n);
    } else {
      state.SkipWithError("column slices: OpenBLAS only");
    }
  };
  const int64_t work = int64_t{g.m} * g.n * g.k;
  const int slice = dtsim::model::gemm_slice_width(g.ta && g.m >= g.n ? g.m : g.n, work);
  for (auto _ : state) {
    if (mode == Mode::kRows32) {
      for (int r0 = 0; r0 < g.m; r0 += dtsim::model::kRowBlock) {
        call(r0, std::min(g.m, r0 + dtsim::model::kRowBlock));
      }
    } else if (mode == Mode::kSlices) {  // as model/kernels.cc: along C's larger side
      if (g.ta && g.m >= g.n) {
        for (int r0 = 0; r0 < g.m; r0 += slice) call(r0, std::min(g.m, r0 + slice));
      } else {
        for (int c0 = 0; c0 < g.n; c0 += slice) call_cols(c0, std::min(g.n, c0 + slice));
      }
    } else {
      call(0, g.m);
    }
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOPs"] =
      benchmark::Counter(2.0 * g.m * g.n * g.k * state.iterations(), benchmark::Counter::kIsRate);
}

// dtsim's model::sgemm (model/gemm.h: its AVX2/FMA kernel when built with it), whole.
void bm_dtsim(benchmark::State& state, Gemm g, Mode /*mode*/) {
  const size_t rows_a = g.ta ? g.k : g.m, rows_b = g.tb ? g.n : g.k;
  std::vector<float> a(rows_a * g.lda, 0.5f), b(rows_b * g.ldb, 0.25f), c(size_t(g.m) * g.n);
  for (auto _ : state) {
    dtsim::model::sgemm(g.ta, g.tb, g.m, g.n, g.k, a.data(), g.lda, b.data(), g.ldb,
                        g.accumulate ? 1.0f : 0.0f, c.data(), g.n);
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOPs"] =
      benchmark::Counter(2.0 * g.m * g.n * g.k * state.iterations(), benchmark::Counter::kIsRate);
}

void register_all() {
  for (int B : {64, 16}) {
    for (const Case& c : cases(B)) {
      const std::string base = std::string("/B:") + std::to_string(B) + "/" + c.name;
      auto add = [&](const char* lib, auto fn, Mode mode, const char* how) {
        benchmark::RegisterBenchmark((lib + base + how).c_str(), fn, c.g, mode)
            ->Unit(benchmark::kMicrosecond);
      };
      add(dtsim::model::gemm_backend(), bm_dtsim, Mode::kWhole, "/whole");
      add("eigen", bm_gemm<false>, Mode::kWhole, "/whole");
      add("eigen", bm_gemm<false>, Mode::kRows32, "/rows32");
      add("openblas", bm_gemm<true>, Mode::kWhole, "/whole");
      add("openblas", bm_gemm<true>, Mode::kSlices, "/slices");
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
