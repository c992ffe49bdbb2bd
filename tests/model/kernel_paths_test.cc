// Each shortcut path of model/kernels.h against the kernels it stands for, bitwise: the GELU
// derivative kept by the forward against gelu_forward and gelu_grad, over sizes around the
// 16-float packs and the 4096-element chunks and over values where GELU's formula changes
// branch (e^{-2u} overflowing below x ~ -10.4, signed zeros, infinities, NaN).
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

INSTANTIATE_TEST_SUITE_P(Sizes, GeluKeptTest, ::testing::Values(1, 15, 16, 17, 4099, 3 * 4096 + 5),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "n" + std::to_string(info.param);
                         });

}  // namespace
}  // namespace dtsim::model
