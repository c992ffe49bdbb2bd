// model/gemm.h against a double-precision reference, over shapes that hit every edge of the
// AVX2 kernel's 6 x 16 tiles (1 row, 5 rows, 17 columns, k = 1, ...) and the model's own,
// for the four transpose cases and beta 0, 1 and 0.5.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "model/gemm.h"
#include "tests/model/grad_check.h"

namespace dtsim::model {
namespace {

using testing::random_vector;

struct GemmCase {
  bool ta, tb;
  int m, n, k;
};

void PrintTo(const GemmCase& c, std::ostream* os) {
  *os << (c.ta ? "A^T " : "A ") << (c.tb ? "B^T " : "B ") << c.m << " x " << c.n << " x " << c.k;
}

std::string case_name(const ::testing::TestParamInfo<GemmCase>& info) {
  const GemmCase& c = info.param;
  return std::string(c.ta ? "T" : "N") + (c.tb ? "T" : "N") + "_m" + std::to_string(c.m) + "_n" +
         std::to_string(c.n) + "_k" + std::to_string(c.k);
}

// A stored (m, k) or, transposed, (k, m), with a leading dimension 3 wider than needed so
// no case relies on contiguous rows; likewise B and C.
struct Operands {
  explicit Operands(const GemmCase& c)
      : lda((c.ta ? c.m : c.k) + 3),
        ldb((c.tb ? c.k : c.n) + 3),
        ldc(c.n + 3),
        a(random_vector(size_t(c.ta ? c.k : c.m) * lda, 11)),
        b(random_vector(size_t(c.tb ? c.n : c.k) * ldb, 12)),
        c0(random_vector(size_t(c.m) * ldc, 13)) {}
  float at_a(const GemmCase& c, int i, int p) const {
    return c.ta ? a[size_t(p) * lda + i] : a[size_t(i) * lda + p];
  }
  float at_b(const GemmCase& c, int p, int j) const {
    return c.tb ? b[size_t(j) * ldb + p] : b[size_t(p) * ldb + j];
  }
  int lda, ldb, ldc;
  std::vector<float> a, b, c0;
};

class GemmTest : public ::testing::TestWithParam<GemmCase> {};

// Error bound of an fp32 product of k terms accumulated in any order with rounding at
// each step, and the one rounding of beta * C + product: (k + 2) u sum |a_p b_p| + 2 u
// |beta c|, u = 2^-24 (Higham, Accuracy and Stability, 3.1). Every element must lie within
// it of the double reference.
TEST_P(GemmTest, MatchesDoubleReferenceWithinTheRoundingBound) {
  const GemmCase c = GetParam();
  const Operands o(c);
  const double u = std::ldexp(1.0, -24);
  for (const float beta : {0.0f, 1.0f, 0.5f}) {
    std::vector<float> out = o.c0;
    sgemm(c.ta, c.tb, c.m, c.n, c.k, o.a.data(), o.lda, o.b.data(), o.ldb, beta, out.data(), o.ldc);
    for (int i = 0; i < c.m; ++i) {
      for (int j = 0; j < c.n; ++j) {
        double ref = 0, mag = 0;
        for (int p = 0; p < c.k; ++p) {
          const double t = double(o.at_a(c, i, p)) * double(o.at_b(c, p, j));
          ref += t;
          mag += std::fabs(t);
        }
        const double old = double(o.c0[size_t(i) * o.ldc + j]) * beta;
        const double bound = (c.k + 2) * u * mag + 2 * u * std::fabs(old) + 1e-30;
        ASSERT_NEAR(out[size_t(i) * o.ldc + j], ref + old, bound)
            << "C(" << i << ", " << j << "), beta " << beta;
      }
    }
    // The padding between rows is never written.
    for (int i = 0; i < c.m; ++i) {
      for (int j = c.n; j < o.ldc; ++j) {
        ASSERT_EQ(out[size_t(i) * o.ldc + j], o.c0[size_t(i) * o.ldc + j]);
      }
    }
  }
}

// The AVX2 kernel's contract: each element is one in-order FMA chain over k from zero, then
// beta * C + chain. So a scalar std::fma chain gives the same bits, and so does any cut of
// C into column slices (which the model's parallel slicing relies on).
TEST_P(GemmTest, Avx2KernelIsOneInOrderFmaChainPerElement) {
  if (std::string(gemm_backend()) == "openblas") GTEST_SKIP() << "built without AVX2/FMA";
  const GemmCase c = GetParam();
  const Operands o(c);
  std::vector<float> out = o.c0, sliced = o.c0;
  sgemm(c.ta, c.tb, c.m, c.n, c.k, o.a.data(), o.lda, o.b.data(), o.ldb, 1.0f, out.data(), o.ldc);
  const bool chain = !(c.ta && c.tb);  // A^T B^T runs on OpenBLAS
  for (int i = 0; chain && i < c.m; ++i) {
    for (int j = 0; j < c.n; ++j) {
      float acc = 0.0f;
      for (int p = 0; p < c.k; ++p) acc = std::fma(o.at_a(c, i, p), o.at_b(c, p, j), acc);
      const float want = o.c0[size_t(i) * o.ldc + j] + acc;
      ASSERT_EQ(out[size_t(i) * o.ldc + j], want) << "C(" << i << ", " << j << ")";
    }
  }
  // Column slices of 5: B's columns j0.. are at b + j0 (or B's rows, transposed).
  for (int j0 = 0; j0 < c.n; j0 += 5) {
    const int w = std::min(5, c.n - j0);
    const float* b0 = c.tb ? o.b.data() + size_t(j0) * o.ldb : o.b.data() + j0;
    sgemm(c.ta, c.tb, c.m, w, c.k, o.a.data(), o.lda, b0, o.ldb, 1.0f, sliced.data() + j0, o.ldc);
  }
  if (chain) {
    EXPECT_EQ(sliced, out);
  }
}

// sgemm_bias is sgemm with beta 1 onto rows set to the bias, bitwise, edges included.
// sgemm_bias takes A untransposed: its suite runs the shapes with A as stored.
class GemmBiasTest : public GemmTest {};

TEST_P(GemmBiasTest, BiasVariantEqualsBetaOneOntoTheBias) {
  const GemmCase c = GetParam();
  const Operands o(c);
  std::vector<float> bias = testing::random_vector(c.n, 14);
  bias[0] = -0.0f;  // -0 + a +0 chain is +0 either way
  std::vector<float> want = o.c0, got = o.c0;
  for (int i = 0; i < c.m; ++i)
    std::copy(bias.begin(), bias.end(), want.begin() + size_t(i) * o.ldc);
  sgemm(false, c.tb, c.m, c.n, c.k, o.a.data(), o.lda, o.b.data(), o.ldb, 1.0f, want.data(), o.ldc);
  sgemm_bias(c.tb, c.m, c.n, c.k, o.a.data(), o.lda, o.b.data(), o.ldb, bias.data(), got.data(),
             o.ldc);
  EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0);
}

// sgemm_sgd is sgemm with beta 0 into a gradient buffer, then SgdUpdate::apply on every
// element, bitwise, edges included; with weight decay, so W itself enters the update.
TEST_P(GemmTest, SgdVariantEqualsTheStoredGradientThenTheUpdate) {
  const GemmCase c = GetParam();
  const Operands o(c);
  const SgdUpdate u{0.05f, 0.01f};
  std::vector<float> g(size_t(c.m) * o.ldc), want = o.c0, got = o.c0;
  sgemm(c.ta, c.tb, c.m, c.n, c.k, o.a.data(), o.lda, o.b.data(), o.ldb, 0.0f, g.data(), o.ldc);
  for (int i = 0; i < c.m; ++i) {
    for (int j = 0; j < c.n; ++j) {
      float& w = want[size_t(i) * o.ldc + j];
      w = u.apply(w, g[size_t(i) * o.ldc + j]);
    }
  }
  sgemm_sgd(c.ta, c.tb, c.m, c.n, c.k, o.a.data(), o.lda, o.b.data(), o.ldb, u, got.data(), o.ldc);
  EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0);
}

// sgemm_scaled is sgemm with beta 0, then each element 0 + c * s, bitwise, edges included;
// S holds -0s, so a missing "+0" (a -0 product kept as -0) fails.
class GemmScaledTest : public GemmTest {};

TEST_P(GemmScaledTest, ScaledVariantEqualsTheProductTimesS) {
  const GemmCase c = GetParam();
  const Operands o(c);
  std::vector<float> scale = testing::random_vector(size_t(c.m) * o.ldc, 15);
  for (size_t i = 0; i < scale.size(); i += 3) scale[i] = -0.0f;
  std::vector<float> want = o.c0, got = o.c0;
  sgemm(false, false, c.m, c.n, c.k, o.a.data(), o.lda, o.b.data(), o.ldb, 0.0f, want.data(),
        o.ldc);
  for (int i = 0; i < c.m; ++i) {
    for (int j = 0; j < c.n; ++j) {
      const size_t at = size_t(i) * o.ldc + j;
      want[at] = 0.0f + want[at] * scale[at];
    }
  }
  sgemm_scaled(c.m, c.n, c.k, o.a.data(), o.lda, o.b.data(), o.ldb, scale.data(), got.data(),
               o.ldc);
  EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0);
}

// Every transpose case, with shapes at each edge of the 6 x 16 tiles and the model's own.
const GemmCase kShapes[] = {
    GemmCase{false, false, 1, 1, 1},       GemmCase{false, false, 5, 7, 3},
    GemmCase{false, false, 6, 16, 8},      GemmCase{false, false, 7, 17, 9},
    GemmCase{false, false, 13, 33, 65},    GemmCase{false, false, 64, 130, 256},
    GemmCase{true, false, 1, 1, 1},        GemmCase{true, false, 5, 7, 3},
    GemmCase{true, false, 7, 17, 9},       GemmCase{true, false, 130, 40, 64},
    GemmCase{true, false, 19, 1030, 16},   GemmCase{true, false, 12, 16, 5},
    GemmCase{false, true, 1, 1, 1},        GemmCase{false, true, 5, 7, 3},
    GemmCase{false, true, 17, 7, 9},       GemmCase{false, true, 64, 70, 256},
    GemmCase{false, true, 17, 40, 33},     GemmCase{false, true, 3, 1030, 5},
    GemmCase{false, true, 16, 18, 8},      GemmCase{false, true, 33, 6, 1030},
    GemmCase{false, true, 100, 150, 1030}, GemmCase{false, true, 130, 200, 64},
    GemmCase{true, true, 5, 7, 3},         GemmCase{true, true, 17, 16, 9}};

// The shapes of kShapes with A as stored (and, with neither, B too).
std::vector<GemmCase> untransposed_a(bool neither = false) {
  std::vector<GemmCase> out;
  for (const GemmCase& c : kShapes) {
    if (!c.ta && !(neither && c.tb)) out.push_back(c);
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemmTest, ::testing::ValuesIn(kShapes), case_name);
INSTANTIATE_TEST_SUITE_P(Shapes, GemmBiasTest, ::testing::ValuesIn(untransposed_a()), case_name);
INSTANTIATE_TEST_SUITE_P(Shapes, GemmScaledTest, ::testing::ValuesIn(untransposed_a(true)),
                         case_name);

}  // namespace
}  // namespace dtsim::model
