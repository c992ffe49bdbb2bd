// Each shortcut path of model/kernels.h against the kernels it stands for, bitwise: the GELU
// derivative kept by the forward against gelu_forward and gelu_grad, over sizes around the
// 16-float packs, the 4-register groups and the 4096-element chunks and over values where GELU's
// formula changes branch (e^{-2u} overflowing below x ~ -10.4, signed zeros, infinities, NaN); and
// the input gradient with GELU's derivative applied as it is stored against the two calls it
// replaces.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "model/kernels.h"
#include "tests/model/grad_check.h"

namespace dtsim::model {
namespace {

using testing::random_vector;

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// n values, uniform in [-12, 12) with the special ones spread over the front.
std::vector<float> gelu_inputs(int n) {
  std::vector<float> x = random_vector(n, 31, 12.0f);
  const float inf = std::numeric_limits<float>::infinity();
  const float special[] = {0.0f,  -0.0f, -10.3f, -10.4f,        -10.5f, -11.0f, -80.0f,
                           80.0f, inf,   -inf,   std::nanf(""), 1e-30f, -1e-30f};
  for (size_t i = 0; i < std::size(special) && i < x.size(); ++i) x[i * 3 % x.size()] = special[i];
  return x;
}

class GeluKeptTest : public ::testing::TestWithParam<int> {};

TEST_P(GeluKeptTest, ForwardAndGradEqualGeluForwardAndGeluGrad) {
  const int n = GetParam();
  const std::vector<float> x = gelu_inputs(n);
  std::vector<float> dy = random_vector(n, 32);
  if (n > 1) dy[1] = -0.0f;  // a -0 product must come out +0, as gelu_grad's does
  const float nan = std::nanf("");
  std::vector<float> y_ref(n, nan), dx_ref(n, nan), y(n, nan), d(n, nan), dx(n, nan);
  gelu_forward(x, y_ref);
  gelu_grad(x, dy, dx_ref);
  gelu_forward_keep_grad(x, y, d);
  gelu_grad_from_kept(d, dy, dx);
  EXPECT_TRUE(same_bits(y, y_ref));
  EXPECT_TRUE(same_bits(dx, dx_ref));
  // In place, as MlpBlock runs it: the pre-activations replaced by the derivative.
  std::vector<float> in_place = x, y2(n, nan), dx2(n, nan);
  gelu_forward_keep_grad(in_place, y2, in_place);
  gelu_grad_from_kept(in_place, dy, dx2);
  EXPECT_TRUE(same_bits(y2, y_ref));
  EXPECT_TRUE(same_bits(dx2, dx_ref));
}

INSTANTIATE_TEST_SUITE_P(Sizes, GeluKeptTest,
                         ::testing::Values(1, 15, 16, 17, 64, 65, 100, 4099, 3 * 4096 + 5),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "n" + std::to_string(info.param);
                         });

struct LinearShape {
  int batch, in, out;
};

class InputGradScaledTest : public ::testing::TestWithParam<LinearShape> {};

// Shapes the thread pool cuts into column slices (in large: each slice must scale by its
// own columns of s), edges of the 16-column tiles, and -0s in s (a -0 product reads +0).
TEST_P(InputGradScaledTest, EqualsInputGradThenGeluGradFromKept) {
  const auto [batch, in, out] = GetParam();
  const std::vector<float> dy = random_vector(size_t(batch) * out, 43);
  const std::vector<float> w = random_vector(size_t(out) * in, 44);
  std::vector<float> s = random_vector(size_t(batch) * in, 45);
  for (size_t i = 0; i < s.size(); i += 5) s[i] = -0.0f;
  const float nan = std::nanf("");
  std::vector<float> dh(s.size(), nan), want(s.size(), nan), got(s.size(), nan);
  linear_input_grad(dy, w, dh, batch, in, out);
  gelu_grad_from_kept(s, dh, want);
  linear_input_grad_scaled(dy, w, s, got, batch, in, out);
  EXPECT_TRUE(same_bits(got, want));
}

INSTANTIATE_TEST_SUITE_P(Shapes, InputGradScaledTest,
                         ::testing::Values(LinearShape{64, 1024, 256}, LinearShape{64, 4096, 16},
                                           LinearShape{7, 33, 5}, LinearShape{1, 1, 1},
                                           LinearShape{13, 17, 9}),
                         [](const ::testing::TestParamInfo<LinearShape>& info) {
                           const LinearShape& p = info.param;
                           return "b" + std::to_string(p.batch) + "_in" + std::to_string(p.in) +
                                  "_out" + std::to_string(p.out);
                         });

}  // namespace
}  // namespace dtsim::model
