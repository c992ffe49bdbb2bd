// SGD and Adam(W): hand-computed steps, slice updates equal to whole-buffer updates bit for
// bit (what ZeRO relies on), and the mixed-precision master-weight path.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "model/optimizer.h"
#include "model/param_layout.h"
#include "tests/model/grad_check.h"

namespace dtsim::model {
namespace {

using testing::random_vector;

TEST(SgdTest, MomentumMatchesHandComputation) {
  Sgd sgd({.lr = 0.1f, .momentum = 0.5f}, 1);
  std::vector<float> p = {1.0f};
  sgd.step(p, std::vector<float>{2.0f});  // buf = 2, p = 1 - 0.2 = 0.8
  EXPECT_FLOAT_EQ(p[0], 0.8f);
  sgd.step(p, std::vector<float>{1.0f});  // buf = 0.5 * 2 + 1 = 2, p = 0.8 - 0.2 = 0.6
  EXPECT_FLOAT_EQ(p[0], 0.6f);
}

TEST(AdamTest, StepsMatchTheFormulaInDouble) {
  const AdamConfig c{.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.99f, .eps = 1e-8f};
  Adam adam(c, 1);
  std::vector<float> p = {0.5f};
  double pd = 0.5, m = 0, v = 0;
  const float grads[] = {0.3f, -0.1f, 0.7f};
  for (int t = 1; t <= 3; ++t) {
    const double g = grads[t - 1];
    adam.step(p, std::vector<float>{grads[t - 1]});
    m = 0.9 * m + 0.1 * g;
    v = 0.99 * v + 0.01 * g * g;
    pd -= 0.01 * (m / (1 - std::pow(0.9, t))) / (std::sqrt(v / (1 - std::pow(0.99, t))) + 1e-8);
    EXPECT_NEAR(p[0], pd, 1e-6) << "step " << t;
  }
  EXPECT_EQ(adam.steps(), 3);
}

TEST(AdamTest, DecoupledWeightDecay) {
  Adam adam({.lr = 0.1f, .weight_decay = 0.5f}, 2);
  std::vector<float> p = {2.0f, -4.0f};
  adam.step(p, std::vector<float>{0.0f, 0.0f});  // zero grad: only p *= 1 - lr * wd
  EXPECT_FLOAT_EQ(p[0], 2.0f * 0.95f);
  EXPECT_FLOAT_EQ(p[1], -4.0f * 0.95f);
}

TEST(AdamTest, ShardedUpdatesEqualTheWholeBitwise) {
  const size_t n = 1001;
  std::vector<float> whole = random_vector(n, 1);
  std::vector<float> sharded = whole;
  Adam full({.lr = 1e-2f, .weight_decay = 0.01f}, n);
  std::vector<Adam> shards;
  const int ranks = 3;
  for (int r = 0; r < ranks; ++r) {
    shards.emplace_back(AdamConfig{.lr = 1e-2f, .weight_decay = 0.01f},
                        shard_range(n, ranks, r).size());
  }
  for (int step = 0; step < 4; ++step) {
    const std::vector<float> g = random_vector(n, 100 + step);
    full.step(whole, g);
    for (int r = 0; r < ranks; ++r) {
      const ParamRange s = shard_range(n, ranks, r);
      shards[r].step(std::span(sharded).subspan(s.begin, s.size()),
                     std::span<const float>(g).subspan(s.begin, s.size()));
    }
  }
  EXPECT_EQ(whole, sharded);
}

TEST(AdamTest, MixedPrecisionKeepsFp32MasterAndRoundsWeights) {
  const size_t n = 64;
  const std::vector<float> init = random_vector(n, 2);
  std::vector<BFloat16> w(n);
  for (size_t i = 0; i < n; ++i) w[i] = BFloat16(init[i]);
  std::vector<float> w32(n);
  for (size_t i = 0; i < n; ++i) w32[i] = static_cast<float>(w[i]);

  Adam mixed({.lr = 1e-3f}, w);
  Adam reference({.lr = 1e-3f}, n);
  for (int step = 0; step < 3; ++step) {
    const std::vector<float> g = random_vector(n, 200 + step);
    std::vector<BFloat16> g16(n);
    std::vector<float> g16_as_float(n);
    for (size_t i = 0; i < n; ++i) {
      g16[i] = BFloat16(g[i]);
      g16_as_float[i] = static_cast<float>(g16[i]);
    }
    mixed.step(w, g16);
    reference.step(w32, g16_as_float);  // fp32 Adam on the same (bf16-valued) gradients
  }
  int moved_below_bf16 = 0;
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(mixed.master()[i], w32[i]);         // the master is exactly fp32 Adam
    EXPECT_EQ(w[i].bits, BFloat16(w32[i]).bits);  // the weights are its rounding
    moved_below_bf16 += static_cast<float>(w[i]) != w32[i];
  }
  EXPECT_GT(moved_below_bf16, 0);  // updates of 1e-3 are below bf16 resolution: master matters
}

}  // namespace
}  // namespace dtsim::model
