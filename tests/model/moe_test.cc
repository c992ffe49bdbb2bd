// The MoE layer: router, gates, experts and aux loss against central finite differences;
// the sparse dispatch/combine path against the dense all-expert reference (forward and
// backward, with and without tokens dropped at capacity); routing rules by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <ostream>
#include <vector>

#include "model/kernels.h"
#include "model/layer_stack.h"
#include "model/moe.h"
#include "model/moe_layer.h"
#include "model/moe_model.h"
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

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The split pieces of an expert's and the router's backward against the kernel calls of the
// fused backward written out here (each weight gradient and input gradient from its own
// linear_backward call in one): bitwise, including the signs of zeros.
TEST(MoeSplitBackward, ExpertAndRouterPiecesAreTheFusedKernelCallsBitwise) {
  MoeConfig c = small_config(2, 0.0f);
  const int n = 7, T = kTokens, D = c.d_model, F = c.d_ff, E = c.num_experts;
  const auto block = random_vector(moe_expert_size(c), 61, 0.5f);
  const auto x = random_vector(size_t(n) * D, 62), dy = random_vector(size_t(n) * D, 63);
  const ExpertWeights w = expert_weights(block, c);
  ExpertActivations act;
  std::vector<float> y(size_t(n) * D);
  expert_forward(w, x, n, c, act, y);

  std::vector<float> want_g(block.size(), 0.0f), want_dx(size_t(n) * D, 0.0f);
  {
    const ExpertGrads g = expert_grads(want_g, c);
    std::vector<float> d_hid(size_t(n) * F, 0.0f), d_pre(size_t(n) * F, 0.0f);
    linear_backward(dy, act.hid, w.w2, d_hid, g.w2, g.b2, n, F, D);
    gelu_backward(act.pre, d_hid, d_pre);
    linear_backward(d_pre, x, w.w1, want_dx, g.w1, g.b1, n, D, F);
  }
  // Scratch larger than needed and full of garbage: the pieces must not read it.
  std::vector<float> got_g(block.size(), 0.0f), got_dx(size_t(n) * D, 0.0f);
  std::vector<float> d_hid(size_t(n + 3) * F, std::nanf("")), d_pre(size_t(n) * F, 1e30f);
  expert_backward_input(w, x, act, dy, n, c, d_hid, d_pre, got_dx);
  expert_backward_weight(x, act, dy, d_pre, n, c, expert_grads(got_g, c));
  EXPECT_TRUE(same_bits(got_dx, want_dx)) << "expert input gradient";
  EXPECT_TRUE(same_bits(got_g, want_g)) << "expert weight gradients";

  const auto wr = random_vector(size_t(E) * D, 64), h = random_vector(size_t(T) * D, 65);
  const Routing r = router_forward(h, wr, T, c);
  const auto d_probs = random_vector(size_t(T) * E, 66);
  std::vector<float> want_dwr(wr.size(), 0.0f), want_dh(h.size(), 0.0f);
  {
    std::vector<float> d_logits(size_t(T) * E, 0.0f);
    softmax_backward(r.probs, d_probs, d_logits, T, E);
    linear_backward(d_logits, h, wr, want_dh, want_dwr, {}, T, D, E);
  }
  std::vector<float> got_dwr(wr.size(), 0.0f), got_dh(h.size(), 0.0f);
  std::vector<float> d_logits(size_t(T) * E, std::nanf(""));
  router_backward_input(h, wr, r, d_probs, d_logits, got_dh, D);
  router_backward_weight(h, r, d_logits, got_dwr, D);
  EXPECT_TRUE(same_bits(got_dh, want_dh)) << "router input gradient";
  EXPECT_TRUE(same_bits(got_dwr, want_dwr)) << "router weight gradient";
}

// ZB-H1 on MoE blocks: a stack of the MoE classifier split into B (input gradients, dy
// overwritten once it returns) and W (weight gradients) in the interleaving F F F B B W B W W
// gives fused backward's input and weight gradients bit for bit, and the activations the
// split keeps are recorded from B to W and given back by W.
TEST(MoeSplitBackward, StackOfMoeBlocksSplitIsFusedBitwise) {
  MoeModelConfig mc;
  mc.input_dim = 5;
  mc.num_classes = 3;
  mc.moe = small_config(2, 1.0f);  // top-2, tokens dropped at capacity
  mc.num_blocks = 2;
  const int M = 3, B = kTokens, L = mc.num_blocks;
  auto make = [&] {
    // Blocks only (a middle pipeline stage that sends its input gradient back).
    Layers all = moe_model_layers(mc), blocks;
    for (int l = 1; l <= L; ++l) blocks.push_back(std::move(all[l]));
    auto s = std::make_unique<LayerStack>(std::move(blocks), Precision::kFp32);
    s->store().set_params(init_params(s->layout(), 7));
    s->store().zero_grad();
    return s;
  };
  auto fused = make(), split = make();
  ASSERT_TRUE(split->splits_backward());
  const size_t io = size_t(B) * mc.moe.d_model;
  std::vector<std::vector<float>> xs, dys, want_dx, got_dx;
  for (int m = 0; m < M; ++m) {
    xs.push_back(random_vector(io, 70 + m));
    dys.push_back(random_vector(io, 80 + m));
  }
  for (int m = 0; m < M; ++m) {
    fused->forward(0, xs[m], B);
    std::vector<float> dy = dys[m];
    const auto dx = fused->backward(0, dy, {0.5f, B}, nullptr, true);
    want_dx.emplace_back(dx.begin(), dx.end());
  }
  for (int m = 0; m < M; ++m) split->forward(m, xs[m], B);
  int w = 0;  // the next W, in micro-batch order
  for (int m : {0, 1, -1, 2, -1, -1}) {
    if (m < 0) {
      const int64_t before = split->memory().bytes(MemoryCategory::kActivations);
      split->backward_weight(w++, {0.5f, B});
      EXPECT_LT(split->memory().bytes(MemoryCategory::kActivations), before)
          << "W of micro-batch " << w - 1 << " gives back what its B kept";
      continue;
    }
    std::vector<float> dy = dys[m];
    const int64_t before = split->memory().bytes(MemoryCategory::kActivations);
    const auto dx = split->backward_input(m, dy, {0.5f, B}, true);
    got_dx.emplace_back(dx.begin(), dx.end());
    std::fill(dy.begin(), dy.end(), std::nanf(""));  // W must not read it
    EXPECT_GT(split->memory().bytes(MemoryCategory::kActivations), before)
        << "B of micro-batch " << m << " records the gradients it keeps for W";
  }
  ASSERT_EQ(got_dx.size(), want_dx.size());
  for (int m = 0; m < M; ++m) {
    EXPECT_TRUE(same_bits(got_dx[m], want_dx[m])) << "input gradient of micro-batch " << m;
  }
  EXPECT_TRUE(same_bits(split->store().grads(), fused->store().grads())) << "weight gradients";
}

}  // namespace
}  // namespace dtsim::model
