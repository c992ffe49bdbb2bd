// The MoE layer: router, gates, experts and aux loss against central finite differences;
// the sparse dispatch/combine path against the dense all-expert reference (forward and
// backward, with and without tokens dropped at capacity); routing rules by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <ostream>
#include <vector>

#include "model/moe.h"
#include "model/moe_layer.h"
#include "tests/model/grad_check.h"

namespace dtsim::model {
namespace {

using testing::check_gradient;
using testing::dot;
using testing::random_vector;

constexpr int kTokens = 12;

MoeConfig small_config(int top_k, float capacity_factor) {
  MoeConfig c;
  c.d_model = 6;
  c.d_ff = 8;
  c.num_experts = 4;
  c.top_k = top_k;
  c.capacity_factor = capacity_factor;
  c.aux_alpha = 0.5f;  // large, so the aux gradient is a visible part of the check
  return c;
}

int dropped_slots(const Routing& r) {
  int n = 0;
  for (int row : r.row) n += row < 0;
  return n;
}

struct MoeCase {
  int top_k;
  float capacity_factor;
};
// The case's test name (and how gtest prints it): "top2_dropping".
std::ostream& operator<<(std::ostream& os, const MoeCase& c) {
  return os << "top" << c.top_k << (c.capacity_factor > 0 ? "_dropping" : "_unlimited");
}

class MoeGradTest : public ::testing::TestWithParam<MoeCase> {};

TEST_P(MoeGradTest, LayerBackwardMatchesFiniteDifferences) {
  const MoeConfig c = small_config(GetParam().top_k, GetParam().capacity_factor);
  auto params = random_vector(moe_layer_size(c), 31, 0.6f);
  auto h = random_vector(size_t(kTokens) * c.d_model, 32);
  const auto probe = random_vector(size_t(kTokens) * c.d_model, 33);
  const float aux_weight = 3.0f;
  MoeLayer layer(c);
  std::vector<float> y(h.size());
  // loss = sum(y * probe) + aux_weight * aux
  auto run = [&] {
    const float aux = layer.forward(params, h, kTokens, y);
    return dot(y, probe) + aux_weight * aux;
  };
  run();
  const Routing reference = layer.routing();
  if (GetParam().capacity_factor > 0 && GetParam().capacity_factor < 1) {
    ASSERT_GT(dropped_slots(reference), 0) << "the case must drop tokens";
  }
  std::vector<float> grads(params.size()), dh(h.size());
  layer.backward(params, probe, aux_weight, grads, dh);
  // Finite differences are valid only where the perturbation leaves the routing unchanged.
  auto same_routing = [&] {
    return layer.routing().expert == reference.expert && layer.routing().row == reference.row;
  };
  auto router = std::span(params).first(moe_router_size(c));
  auto router_grad = std::span<const float>(grads).first(moe_router_size(c));
  auto experts = std::span(params).subspan(moe_router_size(c));
  auto experts_grad = std::span<const float>(grads).subspan(moe_router_size(c));
  const auto r1 = check_gradient(router, router_grad, run, 1e-3f, 2e-3, 2e-2, same_routing);
  EXPECT_GRAD_OK(r1);
  EXPECT_GT(r1.checked, static_cast<int>(router.size()) / 2);
  EXPECT_GRAD_OK(check_gradient(experts, experts_grad, run, 1e-2f, 2e-3, 2e-2, same_routing));
  EXPECT_GRAD_OK(check_gradient(h, dh, run, 1e-3f, 2e-3, 2e-2, same_routing));
}

// k above 2 up to k = E = 4 (every expert on every token).
INSTANTIATE_TEST_SUITE_P(Routing, MoeGradTest,
                         ::testing::Values(MoeCase{1, 0.0f}, MoeCase{1, 0.5f}, MoeCase{2, 0.0f},
                                           MoeCase{2, 0.6f}, MoeCase{3, 0.0f}, MoeCase{3, 0.6f},
                                           MoeCase{4, 0.0f}, MoeCase{4, 0.7f}),
                         [](const auto& info) { return ::testing::PrintToString(info.param); });

TEST(MoeAuxLossTest, GradientMatchesFiniteDifferencesAndFormula) {
  MoeConfig c = small_config(2, 0.0f);
  auto params = random_vector(moe_layer_size(c), 34, 0.6f);
  auto h = random_vector(size_t(kTokens) * c.d_model, 35);
  auto wr = std::span(params).first(moe_router_size(c));
  Routing r = router_forward(h, wr, kTokens, c);
  // Formula by hand: alpha * E * sum_i f_i * P_i.
  double expected = 0.0;
  for (int e = 0; e < c.num_experts; ++e) {
    int routed = 0;
    double p = 0.0;
    for (int t = 0; t < kTokens; ++t) {
      p += r.probs[t * c.num_experts + e];
      for (int j = 0; j < c.top_k; ++j) routed += r.expert[t * c.top_k + j] == e;
    }
    expected += (routed / double(kTokens * c.top_k)) * (p / kTokens);
  }
  EXPECT_NEAR(aux_loss_forward(r, c.aux_alpha), c.aux_alpha * c.num_experts * expected, 1e-6);

  std::vector<float> d_probs(size_t(kTokens) * c.num_experts, 0.0f), dwr(wr.size()), dh(h.size());
  aux_loss_backward(r, c.aux_alpha, 1.0f, d_probs);
  router_backward(h, wr, r, d_probs, dwr, dh, c.d_model);
  const Routing reference = r;
  auto run = [&] {
    r = router_forward(h, wr, kTokens, c);
    return double(aux_loss_forward(r, c.aux_alpha));
  };
  auto same = [&] { return r.expert == reference.expert; };
  EXPECT_GRAD_OK(check_gradient(wr, dwr, run, 1e-3f, 1e-4, 2e-2, same));
  EXPECT_GRAD_OK(check_gradient(h, dh, run, 1e-3f, 1e-4, 2e-2, same));
}

TEST(MoeRoutingTest, CapacityIsSlotMajorAndDispatchGroupsByExpert) {
  // Two experts, router picks expert 0 first for every token (w0 = +x, w1 = -x, x > 0).
  MoeConfig c;
  c.d_model = 1;
  c.num_experts = 2;
  c.top_k = 2;
  c.capacity_factor = 0.5f;  // capacity = ceil(0.5 * 4 * 2 / 2) = 2
  const std::vector<float> h = {1, 2, 3, 4}, wr = {1, -1};
  const Routing r = router_forward(h, wr, 4, c);
  EXPECT_EQ(r.capacity, 2);
  EXPECT_EQ(r.expert, (std::vector<int>{0, 1, 0, 1, 0, 1, 0, 1}));
  EXPECT_EQ(r.routed, (std::vector<int>{4, 4}));
  EXPECT_EQ(r.counts, (std::vector<int>{2, 2}));
  // Expert 0 keeps tokens 0, 1 (first choices); expert 1 also keeps tokens 0, 1.
  EXPECT_EQ(r.row, (std::vector<int>{0, 2, 1, 3, -1, -1, -1, -1}));
  EXPECT_EQ(r.offsets, (std::vector<int>{0, 2, 4}));
  EXPECT_EQ(r.token_of_row, (std::vector<int>{0, 1, 0, 1}));
  std::vector<float> grouped(4);
  dispatch_forward(h, r, 1, grouped);
  EXPECT_EQ(grouped, (std::vector<float>{1, 2, 1, 2}));
  // Combine restores token order: with expert outputs 10 * row, tokens 2 and 3 pass through.
  const std::vector<float> out = {0, 10, 20, 30};
  std::vector<float> y(4);
  combine_forward(h, out, r, 1, y);
  EXPECT_FLOAT_EQ(y[0], 1 + r.gate[0] * 0 + r.gate[1] * 20);
  EXPECT_FLOAT_EQ(y[1], 2 + r.gate[2] * 10 + r.gate[3] * 30);
  EXPECT_EQ(y[2], 3.0f);
  EXPECT_EQ(y[3], 4.0f);
}

class MoeDenseTest : public ::testing::TestWithParam<MoeCase> {};

TEST_P(MoeDenseTest, SparseMatchesDenseReferenceForwardAndBackward) {
  MoeConfig c = small_config(GetParam().top_k, GetParam().capacity_factor);
  c.d_model = 16;
  c.d_ff = 24;
  c.num_experts = 6;
  const int T = 64;
  auto params = random_vector(moe_layer_size(c), 41, 0.4f);
  auto h = random_vector(size_t(T) * c.d_model, 42);
  // Feature 0 is 1 on every token and the last expert's router weight on it is -20, so that
  // expert is never chosen and the idle-expert check below has something to check.
  const int idle = c.num_experts - 1;
  for (int t = 0; t < T; ++t) h[size_t(t) * c.d_model] = 1.0f;
  params[size_t(idle) * c.d_model] = -20.0f;
  const auto dy = random_vector(size_t(T) * c.d_model, 43);
  MoeLayer sparse(c);
  DenseMoeReference dense(c);
  std::vector<float> ys(h.size()), yd(h.size());
  const float aux_s = sparse.forward(params, h, T, ys);
  const float aux_d = dense.forward(params, h, T, yd);
  EXPECT_EQ(aux_s, aux_d);
  const Routing& r = sparse.routing();
  const int dropped = dropped_slots(r);
  if (GetParam().capacity_factor > 0) {
    ASSERT_GT(dropped, 0);
  } else {
    ASSERT_EQ(dropped, 0);
  }
  for (size_t i = 0; i < ys.size(); ++i) ASSERT_NEAR(ys[i], yd[i], 1e-5) << i;
  // A token with every slot dropped passes through unchanged, bit for bit.
  int passed_through = 0;
  for (int t = 0; t < T; ++t) {
    bool all_dropped = true;
    for (int j = 0; j < c.top_k; ++j) all_dropped &= r.row[t * c.top_k + j] < 0;
    if (!all_dropped) continue;
    ++passed_through;
    for (int d = 0; d < c.d_model; ++d) EXPECT_EQ(ys[t * c.d_model + d], h[t * c.d_model + d]);
  }
  if (GetParam().top_k == 1 && GetParam().capacity_factor > 0) {
    EXPECT_GT(passed_through, 0);
  }

  std::vector<float> gs(params.size()), gd(params.size()), dhs(h.size()), dhd(h.size());
  sparse.backward(params, dy, 2.0f, gs, dhs);
  dense.backward(params, dy, 2.0f, gd, dhd);
  for (size_t i = 0; i < gs.size(); ++i) ASSERT_NEAR(gs[i], gd[i], 1e-4) << "param " << i;
  for (size_t i = 0; i < dhs.size(); ++i) ASSERT_NEAR(dhs[i], dhd[i], 1e-5) << "input " << i;
  // Experts that received no token have exactly zero gradient in both paths.
  ASSERT_EQ(r.counts[idle], 0);
  for (int e = 0; e < c.num_experts; ++e) {
    if (r.counts[e] != 0) continue;
    const size_t begin = moe_router_size(c) + e * moe_expert_size(c);
    for (size_t i = begin; i < begin + moe_expert_size(c); ++i) {
      EXPECT_EQ(gs[i], 0.0f);
      EXPECT_EQ(gd[i], 0.0f);
    }
  }
}

// E = 6 here, one of them idle: k up to 5.
INSTANTIATE_TEST_SUITE_P(Routing, MoeDenseTest,
                         ::testing::Values(MoeCase{1, 0.0f}, MoeCase{1, 0.5f}, MoeCase{2, 0.0f},
                                           MoeCase{2, 0.5f}, MoeCase{3, 0.0f}, MoeCase{3, 0.5f},
                                           MoeCase{5, 0.0f}),
                         [](const auto& info) { return ::testing::PrintToString(info.param); });

// y = h + sum_e softmax(Wr h)_e expert_e(h), in double by hand.
std::vector<double> dense_mixture(const MoeConfig& c, std::span<const float> params,
                                  std::span<const float> h, int T) {
  const int D = c.d_model, F = c.d_ff, E = c.num_experts;
  auto gelu = [](double x) {
    return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  };
  std::vector<double> y(h.begin(), h.begin() + size_t(T) * D);
  for (int t = 0; t < T; ++t) {
    const float* x = &h[size_t(t) * D];
    std::vector<double> p(E);
    double top = -1e300, sum = 0;
    for (int e = 0; e < E; ++e) {
      for (int d = 0; d < D; ++d) p[e] += double(params[size_t(e) * D + d]) * x[d];
      top = std::max(top, p[e]);
    }
    for (double& v : p) sum += v = std::exp(v - top);
    for (int e = 0; e < E; ++e) {
      const ExpertWeights w = expert_weights(
          params.subspan(moe_router_size(c) + e * moe_expert_size(c), moe_expert_size(c)), c);
      std::vector<double> hid(F);
      for (int f = 0; f < F; ++f) {
        double a = w.b1[f];
        for (int d = 0; d < D; ++d) a += double(w.w1[size_t(f) * D + d]) * x[d];
        hid[f] = gelu(a);
      }
      for (int d = 0; d < D; ++d) {
        double o = w.b2[d];
        for (int f = 0; f < F; ++f) o += double(w.w2[size_t(d) * F + f]) * hid[f];
        y[size_t(t) * D + d] += p[e] / sum * o;
      }
    }
  }
  return y;
}

// Top-k with k = E and no capacity limit is the dense softmax-weighted mixture of all
// experts: every token takes every expert once, its gates summing to one.
TEST(MoeTopKTest, AllExpertsGiveTheSoftmaxWeightedMixture) {
  MoeConfig c = small_config(4, 0.0f);
  c.num_experts = c.top_k = 5;
  auto params = random_vector(moe_layer_size(c), 51, 0.5f);
  const auto h = random_vector(size_t(kTokens) * c.d_model, 52);
  MoeLayer layer(c);
  std::vector<float> y(h.size());
  layer.forward(params, h, kTokens, y);
  const Routing& r = layer.routing();
  ASSERT_EQ(dropped_slots(r), 0);
  for (int t = 0; t < kTokens; ++t) {
    std::vector<int> chosen(r.expert.begin() + t * c.top_k, r.expert.begin() + (t + 1) * c.top_k);
    std::sort(chosen.begin(), chosen.end());
    EXPECT_EQ(chosen, (std::vector<int>{0, 1, 2, 3, 4})) << "token " << t;
    double gates = 0;
    for (int j = 0; j < c.top_k; ++j) gates += r.gate[t * c.top_k + j];
    EXPECT_NEAR(gates, 1.0, 1e-6) << "token " << t;
  }
  const std::vector<double> want = dense_mixture(c, params, h, kTokens);
  for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], want[i], 2e-6 * (1 + std::abs(want[i])));
}

}  // namespace
}  // namespace dtsim::model
