// Each kernel's backward against central finite differences, accumulation semantics,
// tensor-parallel slicing, and bitwise determinism across TBB thread counts.
#include <gtest/gtest.h>
#include <oneapi/tbb/global_control.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "model/kernels.h"
#include "tests/model/grad_check.h"

namespace dtsim::model {
namespace {

using testing::check_gradient;
using testing::dot;
using testing::random_vector;

constexpr int kB = 5, kIn = 7, kOut = 4;

TEST(LinearTest, BackwardMatchesFiniteDifferences) {
  auto x = random_vector(kB * kIn, 1);
  auto w = random_vector(kOut * kIn, 2);
  auto b = random_vector(kOut, 3);
  const auto probe = random_vector(kB * kOut, 4);  // loss = sum(y * probe), so dy = probe
  std::vector<float> y(kB * kOut);
  auto loss = [&] {
    linear_forward(x, w, b, y, kB, kIn, kOut);
    return dot(y, probe);
  };
  std::vector<float> dx(x.size()), dw(w.size()), db(b.size());
  linear_backward(probe, x, w, dx, dw, db, kB, kIn, kOut);
  EXPECT_GRAD_OK(check_gradient(x, dx, loss, 1e-2f, 1e-3, 1e-3));
  EXPECT_GRAD_OK(check_gradient(w, dw, loss, 1e-2f, 1e-3, 1e-3));
  EXPECT_GRAD_OK(check_gradient(b, db, loss, 1e-2f, 1e-3, 1e-3));
}

TEST(LinearTest, ForwardMatchesHandComputedValues) {
  // x = [1, 2], W = [[1, 0], [2, -1], [0.5, 0.5]], b = [0, 1, -1] -> y = [1, 1, 0.5]
  const std::vector<float> x = {1, 2}, w = {1, 0, 2, -1, 0.5f, 0.5f}, b = {0, 1, -1};
  std::vector<float> y(3);
  linear_forward(x, w, b, y, 1, 2, 3);
  EXPECT_EQ(y, (std::vector<float>{1, 1, 0.5f}));
  linear_forward(x, w, {}, y, 1, 2, 3);  // no bias
  EXPECT_EQ(y, (std::vector<float>{1, 0, 1.5f}));
}

TEST(LinearTest, BackwardAccumulates) {
  auto x = random_vector(kB * kIn, 5);
  auto w = random_vector(kOut * kIn, 6);
  auto dy = random_vector(kB * kOut, 7);
  std::vector<float> dx1(x.size()), dw1(w.size()), db1(kOut);
  linear_backward(dy, x, w, dx1, dw1, db1, kB, kIn, kOut);
  std::vector<float> dx2 = dx1, dw2 = dw1, db2 = db1;
  linear_backward(dy, x, w, dx2, dw2, db2, kB, kIn, kOut);
  for (size_t i = 0; i < dw1.size(); ++i) EXPECT_FLOAT_EQ(dw2[i], 2 * dw1[i]);
  for (size_t i = 0; i < dx1.size(); ++i) EXPECT_FLOAT_EQ(dx2[i], 2 * dx1[i]);
  for (size_t i = 0; i < db1.size(); ++i) EXPECT_FLOAT_EQ(db2[i], 2 * db1[i]);
}

// The writing variants (no fill before) give the bits the accumulating kernels add into
// zeros, signed zeros included: dy has -0 entries and a whole row of -0, whose products
// are -0 (the accumulating form turns them into +0, so must the writing one).
TEST(LinearTest, WritingVariantsEqualAccumulatingIntoZeros) {
  auto w = random_vector(kOut * kIn, 6);
  auto dy = random_vector(kB * kOut, 7);
  for (int o = 0; o < kOut; ++o) dy[o] = -0.0f;  // row 0
  dy[kOut + 1] = -0.0f;
  const float nan = std::nanf("");
  std::vector<float> acc(kB * kIn, 0.0f), wrote(kB * kIn, nan);
  const auto x_in = random_vector(kB * kIn, 5);
  linear_backward(dy, x_in, w, acc, {}, {}, kB, kIn, kOut);
  linear_input_grad(dy, w, wrote, kB, kIn, kOut);
  EXPECT_EQ(std::memcmp(acc.data(), wrote.data(), acc.size() * sizeof(float)), 0);

  auto x = random_vector(kB * kIn, 8, 3.0f);
  x[0] = 0.0f;
  x[1] = -0.0f;
  std::vector<float> g = random_vector(kB * kIn, 9);
  g[0] = -0.0f;
  g[2] = -0.0f;
  std::vector<float> dacc(x.size(), 0.0f), dwrote(x.size(), nan);
  gelu_backward(x, g, dacc);
  gelu_grad(x, g, dwrote);
  EXPECT_EQ(std::memcmp(dacc.data(), dwrote.data(), dacc.size() * sizeof(float)), 0);
}

TEST(LinearTest, ColumnAndRowSlicesReproduceTheFullLayer) {
  // Column parallel: rows [2, 4) of W give columns [2, 4) of y. Row parallel: the two
  // halves of W's columns, each on its half of x, sum to x W^T (bias added once).
  auto x = random_vector(kB * 6, 8);
  auto w = random_vector(4 * 6, 9);
  auto b = random_vector(4, 10);
  std::vector<float> y(kB * 4);
  linear_forward(x, w, b, y, kB, 6, 4);

  std::vector<float> w_rows(w.begin() + 2 * 6, w.begin() + 4 * 6), y_cols(kB * 2);
  linear_forward(x, w_rows, std::span(b).subspan(2, 2), y_cols, kB, 6, 2);
  for (int r = 0; r < kB; ++r) {
    for (int c = 0; c < 2; ++c) EXPECT_NEAR(y_cols[r * 2 + c], y[r * 4 + 2 + c], 1e-6);
  }
  std::vector<float> part[2];
  for (int s = 0; s < 2; ++s) {
    std::vector<float> xs(kB * 3), ws(4 * 3);
    for (int r = 0; r < kB; ++r) {
      for (int c = 0; c < 3; ++c) xs[r * 3 + c] = x[r * 6 + s * 3 + c];
    }
    for (int o = 0; o < 4; ++o) {
      for (int c = 0; c < 3; ++c) ws[o * 3 + c] = w[o * 6 + s * 3 + c];
    }
    part[s].resize(kB * 4);
    linear_forward(xs, ws, s == 0 ? std::span<const float>(b) : std::span<const float>(), part[s],
                   kB, 3, 4);
  }
  for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(part[0][i] + part[1][i], y[i], 1e-5);
}

TEST(ActivationTest, GeluBackwardMatchesFiniteDifferences) {
  auto x = random_vector(64, 11, 3.0f);
  const auto probe = random_vector(64, 12);
  std::vector<float> y(64), dx(64);
  auto loss = [&] {
    gelu_forward(x, y);
    return dot(y, probe);
  };
  gelu_backward(x, probe, dx);
  EXPECT_GRAD_OK(check_gradient(x, dx, loss, 1e-3f, 1e-3, 1e-2));
}

TEST(ActivationTest, GeluKnownValues) {
  const std::vector<float> x = {0.0f, 1.0f, -1.0f, 3.0f};
  std::vector<float> y(4);
  gelu_forward(x, y);
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_NEAR(y[1], 0.841192f, 1e-5);  // tanh approximation of gelu(1)
  EXPECT_NEAR(y[2], -0.158808f, 1e-5);
  EXPECT_NEAR(y[3], 2.996363f, 1e-5);
}

TEST(ActivationTest, ReluBackwardMatchesFiniteDifferences) {
  auto x = random_vector(64, 13, 3.0f);
  for (float& v : x) {
    if (std::abs(v) < 0.05f) v = 0.5f;  // keep away from the kink
  }
  const auto probe = random_vector(64, 14);
  std::vector<float> y(64), dx(64);
  auto loss = [&] {
    relu_forward(x, y);
    return dot(y, probe);
  };
  relu_backward(x, probe, dx);
  EXPECT_GRAD_OK(check_gradient(x, dx, loss, 1e-2f, 1e-4, 1e-3));
}

TEST(LossTest, MseBackwardMatchesFiniteDifferences) {
  auto y = random_vector(kB * kOut, 15);
  const auto t = random_vector(kB * kOut, 16);
  std::vector<float> dy(y.size());
  mse_loss_backward(y, t, kB, kOut, 1.0f / kB, dy);
  auto loss = [&] { return double(mse_loss_forward(y, t, kB, kOut)); };
  EXPECT_GRAD_OK(check_gradient(y, dy, loss, 1e-2f, 1e-4, 1e-2));
  // Hand value: one row, y = [1, 3], t = [0, 0] -> mean of squares = 5.
  EXPECT_FLOAT_EQ(mse_loss_forward(std::vector<float>{1, 3}, std::vector<float>{0, 0}, 1, 2), 5.0f);
}

TEST(LossTest, SoftmaxCrossEntropyBackwardMatchesFiniteDifferences) {
  auto z = random_vector(kB * kOut, 17, 3.0f);
  const std::vector<int32_t> labels = {0, 3, 1, 1, 2};
  std::vector<float> probs(z.size()), dz(z.size());
  softmax_cross_entropy_forward(z, labels, probs, kB, kOut);
  softmax_cross_entropy_backward(probs, labels, kB, kOut, 1.0f / kB, dz);
  auto loss = [&] { return double(softmax_cross_entropy_forward(z, labels, probs, kB, kOut)); };
  EXPECT_GRAD_OK(check_gradient(z, dz, loss, 1e-2f, 1e-4, 1e-2));
  // Uniform logits over 4 classes: loss = log 4.
  std::vector<float> zero(4, 0.0f), p(4);
  EXPECT_NEAR(softmax_cross_entropy_forward(zero, std::vector<int32_t>{2}, p, 1, 4), std::log(4.0),
              1e-6);
}

TEST(LossTest, SoftmaxBackwardMatchesFiniteDifferences) {
  auto z = random_vector(kB * kOut, 18, 2.0f);
  const auto probe = random_vector(kB * kOut, 19);
  std::vector<float> p(z.size()), dz(z.size());
  softmax_forward(z, p, kB, kOut);
  softmax_backward(p, probe, dz, kB, kOut);
  auto loss = [&] {
    softmax_forward(z, p, kB, kOut);
    return dot(p, probe);
  };
  EXPECT_GRAD_OK(check_gradient(z, dz, loss, 1e-2f, 1e-4, 1e-2));
}

TEST(GradCheckTest, RejectsAWrongGradient) {
  // The checker must be able to fail: a 5% error in one entry is caught.
  auto x = random_vector(kB * kIn, 20);
  auto w = random_vector(kOut * kIn, 21);
  const auto probe = random_vector(kB * kOut, 22);
  std::vector<float> y(kB * kOut), dx(x.size()), dw(w.size());
  linear_backward(probe, x, w, dx, dw, {}, kB, kIn, kOut);
  dw[3] *= 1.05f;
  auto loss = [&] {
    linear_forward(x, w, {}, y, kB, kIn, kOut);
    return dot(y, probe);
  };
  EXPECT_EQ(check_gradient(w, dw, loss, 1e-2f, 1e-3, 1e-3).failed, 1);
}

// Runs a large Linear forward + backward (above the parallel threshold) on `threads` threads.
std::vector<float> run_big_linear(int threads) {
  tbb::global_control limit(tbb::global_control::max_allowed_parallelism, threads);
  const int B = 200, in = 192, out = 160;  // uneven block counts on purpose
  auto x = random_vector(B * in, 23), w = random_vector(out * in, 24), b = random_vector(out, 25);
  auto dy = random_vector(B * out, 26);
  std::vector<float> y(B * out), dx(B * in), dw(out * in), db(out), h(B * out);
  linear_forward(x, w, b, y, B, in, out);
  gelu_forward(y, h);
  linear_backward(dy, x, w, dx, dw, db, B, in, out);
  std::vector<float> all = y;
  all.insert(all.end(), h.begin(), h.end());
  all.insert(all.end(), dx.begin(), dx.end());
  all.insert(all.end(), dw.begin(), dw.end());
  all.insert(all.end(), db.begin(), db.end());
  return all;
}

TEST(KernelDeterminismTest, SameBitsWithOneAndTwoThreads) {
  const std::vector<float> one = run_big_linear(1);
  const std::vector<float> two = run_big_linear(2);
  ASSERT_EQ(one.size(), two.size());
  EXPECT_EQ(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)), 0);
  EXPECT_EQ(run_big_linear(2), two);  // and run to run
}

}  // namespace
}  // namespace dtsim::model
