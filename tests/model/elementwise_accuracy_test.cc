// Accuracy of the vectorised elementwise kernels over a dense sweep, against a double
// evaluation of the same formula and against the scalar float reference they replaced
// (std::tanh from libm), and their independence from an element's position in the buffer.
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <vector>

#include "model/kernels.h"
#include "tests/model/grad_check.h"

namespace dtsim::model {
namespace {

constexpr double kK = 0.7978845608028654, kC = 0.044715;

double gelu_exact(double x) { return 0.5 * x * (1.0 + std::tanh(kK * (x + kC * x * x * x))); }

double gelu_grad_exact(double x) {
  const double t = std::tanh(kK * (x + kC * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * kK * (1.0 + 3.0 * kC * x * x) * (1.0 - t * t);
}

// The scalar kernel dtsim used before the vectorised one (tanh from libm, in float).
float gelu_scalar(float v) {
  const float k = float(kK), c = float(kC);
  return 0.5f * v * (1.0f + std::tanh(k * (v + c * v * v * v)));
}

// Distance in units in the last place between two finite floats.
int64_t ulps(float a, float b) {
  auto key = [](float f) {
    const int32_t i = std::bit_cast<int32_t>(f);
    return i < 0 ? int64_t{INT32_MIN} - i : int64_t{i};
  };
  return std::abs(key(a) - key(b));
}

// x from -12 to 12 in steps of 2^-12 (98305 points), plus a few large magnitudes.
std::vector<float> sweep() {
  std::vector<float> x;
  for (int i = -12 * 4096; i <= 12 * 4096; ++i) x.push_back(float(i) / 4096.0f);
  for (float v : {-1e4f, -300.0f, -60.0f, 60.0f, 300.0f, 1e4f}) x.push_back(v);
  return x;
}

struct Errors {
  double max_abs = 0;
  int64_t max_ulps = 0;
};

TEST(ElementwiseAccuracyTest, GeluForwardCloseToDouble) {
  const std::vector<float> x = sweep();
  std::vector<float> y(x.size());
  gelu_forward(x, y);
  // Ulps over x >= -1, and over [-5, -1): there gelu = x / (1 + e^{-2u}) with 2|u| up to 17,
  // so the float rounding of u (a few ulps) is amplified 2|u|-fold by exp; the scalar libm
  // form loses far more there, to the cancellation in 1 + tanh(u).
  Errors vec, scalar;
  int64_t vec_ulps_neg = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double ref = gelu_exact(x[i]);
    const float ref_f = float(ref);
    vec.max_abs = std::max(vec.max_abs, std::abs(y[i] - ref));
    if (std::abs(x[i]) <= 12.0f) {
      scalar.max_abs = std::max(scalar.max_abs, std::abs(gelu_scalar(x[i]) - ref));
    }
    if (x[i] >= -1.0f && x[i] <= 12.0f) {
      vec.max_ulps = std::max(vec.max_ulps, ulps(y[i], ref_f));
      scalar.max_ulps = std::max(scalar.max_ulps, ulps(gelu_scalar(x[i]), ref_f));
    } else if (x[i] >= -5.0f && x[i] < -1.0f) {
      vec_ulps_neg = std::max(vec_ulps_neg, ulps(y[i], ref_f));
    }
  }
  std::printf(
      "gelu forward: vectorised max abs %.3g, max ulps %lld on [-1, 12], %lld on "
      "[-5, -1); scalar libm reference max abs %.3g (|x| <= 12), max ulps %lld on "
      "[-1, 12]\n",
      vec.max_abs, (long long)vec.max_ulps, (long long)vec_ulps_neg, scalar.max_abs,
      (long long)scalar.max_ulps);
  EXPECT_LE(vec.max_ulps, 4);
  EXPECT_LE(vec_ulps_neg, 48);
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::abs(x[i]) <= 12.0f) {
      ASSERT_NEAR(y[i], gelu_exact(x[i]), 6e-7) << x[i];
    } else {  // large |x|: x itself (or 0), within an ulp of x
      ASSERT_NEAR(y[i], gelu_exact(x[i]), 1.2e-7 * std::abs(x[i])) << x[i];
    }
  }
}

TEST(ElementwiseAccuracyTest, GeluBackwardWithinFewE7OfDouble) {
  const std::vector<float> x = sweep();
  std::vector<float> dy(x.size(), 1.0f), dx(x.size(), 0.0f);
  gelu_backward(x, dy, dx);
  double max_abs = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_TRUE(std::isfinite(dx[i])) << "gelu'(" << x[i] << ") = " << dx[i];  // max drops NaN
    max_abs = std::max(max_abs, std::abs(dx[i] - gelu_grad_exact(x[i])));
  }
  std::printf("gelu backward: vectorised max abs error %.3g (gelu' lies in [-0.17, 1.13])\n",
              max_abs);
  EXPECT_LE(max_abs, 5e-7);
}

TEST(ElementwiseAccuracyTest, ResultDependsOnTheValueNotThePosition) {
  // The same values at every offset 0..16 of a buffer (so every alignment and a tail of
  // every length) give the same bits.
  const std::vector<float> base = testing::random_vector(53, 31, 4.0f);
  std::vector<float> y0(base.size()), d0(base.size(), 0.5f);
  gelu_forward(base, y0);
  gelu_backward(base, base, d0);
  for (int off = 1; off <= 16; ++off) {
    std::vector<float> x(off, 7.0f), y(off + base.size()), d(off + base.size(), 0.5f);
    x.insert(x.end(), base.begin(), base.end());
    gelu_forward(x, y);
    std::vector<float> g = x;
    gelu_backward(x, g, d);
    for (size_t i = 0; i < base.size(); ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(y[off + i]), std::bit_cast<uint32_t>(y0[i])) << off;
      ASSERT_EQ(std::bit_cast<uint32_t>(d[off + i]), std::bit_cast<uint32_t>(d0[i])) << off;
    }
  }
}

// GELU has the bits of the same formula on Eigen's 4-lane SSE packets, which every x86-64
// build has, whatever vector width the build's kernels run: so AVX2 and AVX-512 builds
// agree. (Eigen's pexp<Packet16f> is not pexp_float: an AVX-512 build calling it failed
// this test.) The formula here is gelu_packets' in model/kernels.cc, op for op.
TEST(ElementwiseAccuracyTest, GeluBitsAreTheFourLanePacketsWhateverTheVectorWidth) {
  using namespace Eigen::internal;
  using P4 = Packet4f;
  std::vector<float> x = sweep();
  while (x.size() % 4) x.push_back(0.0f);
  std::vector<float> y(x.size()), d(x.size()), y_fwd(x.size());
  gelu_forward_keep_grad(x, y, d);
  gelu_forward(x, y_fwd);
  const float k = float(kK), c = float(kC);
  const P4 one = pset1<P4>(1.0f);
  for (size_t i = 0; i < x.size(); i += 4) {
    const P4 v = ploadu<P4>(x.data() + i);
    const P4 cube = pmul(pmul(v, v), v);
    const P4 e = pexp_float(pmul(pset1<P4>(-2.0f * k), padd(v, pmul(pset1<P4>(c), cube))));
    const P4 s = pdiv(one, padd(one, e));
    const P4 du = pmul(pset1<P4>(2.0f * k), padd(one, pmul(pset1<P4>(3.0f * c), pmul(v, v))));
    const P4 dd = padd(s, pmul(pmul(pmul(v, du), pmul(e, s)), s));
    const P4 finite = pcmp_lt(e, pset1<P4>(std::numeric_limits<float>::infinity()));
    float ry[4], rd[4];
    pstoreu(ry, pdiv(v, padd(one, e)));
    pstoreu(rd, pand(finite, dd));
    for (int j = 0; j < 4; ++j) {
      ASSERT_EQ(std::bit_cast<uint32_t>(y[i + j]), std::bit_cast<uint32_t>(ry[j])) << x[i + j];
      ASSERT_EQ(std::bit_cast<uint32_t>(y_fwd[i + j]), std::bit_cast<uint32_t>(ry[j])) << x[i + j];
      ASSERT_EQ(std::bit_cast<uint32_t>(d[i + j]), std::bit_cast<uint32_t>(rd[j])) << x[i + j];
    }
  }
}

TEST(ElementwiseAccuracyTest, SoftmaxWithinEightUlpsOfDouble) {
  const int batch = 64, classes = 37;  // a row is two packs and a tail
  const std::vector<float> z = testing::random_vector(batch * classes, 32, 20.0f);
  std::vector<float> p(z.size());
  softmax_forward(z, p, batch, classes);
  int64_t max_ulps = 0;
  for (int r = 0; r < batch; ++r) {
    // The reference starts from the float differences z - max the kernel also rounds to:
    // their rounding (up to half an ulp of 40) is the input's, not the kernel's, error.
    float m = -1e30f;
    for (int c = 0; c < classes; ++c) m = std::max(m, z[r * classes + c]);
    double sum = 0;
    for (int c = 0; c < classes; ++c) sum += std::exp(double(z[r * classes + c] - m));
    for (int c = 0; c < classes; ++c) {
      const double ref = std::exp(double(z[r * classes + c] - m)) / sum;
      if (ref > 1e-30) max_ulps = std::max(max_ulps, ulps(p[r * classes + c], float(ref)));
    }
  }
  std::printf("softmax: max ulps %lld\n", (long long)max_ulps);
  EXPECT_LE(max_ulps, 8);
}

}  // namespace
}  // namespace dtsim::model
