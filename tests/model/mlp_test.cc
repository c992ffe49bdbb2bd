// MlpModel and MoeModel as whole models: layout, hooks, full-model gradients against finite
// differences, gradient scaling, and the DDP == gradient-accumulation recipe, bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "model/data.h"
#include "model/kernels.h"
#include "model/mlp.h"
#include "model/moe_model.h"
#include "model/optimizer.h"
#include "tests/model/grad_check.h"

namespace dtsim::model {
namespace {

using testing::check_gradient;
using testing::random_vector;

const MlpConfig kSmall{.input_dim = 5, .hidden_dim = 7, .num_blocks = 2, .output_dim = 3};

TEST(MlpLayoutTest, LayersAreContiguousAndCoverTheBuffer) {
  const ParamLayout layout = mlp_layout(kSmall);
  ASSERT_EQ(layout.num_layers(), kSmall.num_blocks + 1);
  size_t expected_begin = 0;
  for (int l = 0; l < layout.num_layers(); ++l) {
    EXPECT_EQ(layout.layer_range(l).begin, expected_begin);
    expected_begin = layout.layer_range(l).end;
  }
  EXPECT_EQ(expected_begin, layout.size());
  const size_t block = 2 * 5 * 7 + 7 + 5;
  EXPECT_EQ(layout.size(), 2 * block + 3 * 5 + 3);
  const ParamView& w2 = layout.view("block1.w2");
  EXPECT_EQ(w2.offset, block + 5 * 7 + 7);
  EXPECT_EQ(w2.rows, 5);
  EXPECT_EQ(w2.cols, 7);
  EXPECT_EQ(w2.layer, 1);
}

TEST(ShardRangeTest, SplitsEvenlyLargerFirst) {
  EXPECT_EQ(shard_range(10, 4, 0), (ParamRange{0, 3}));
  EXPECT_EQ(shard_range(10, 4, 1), (ParamRange{3, 6}));
  EXPECT_EQ(shard_range(10, 4, 2), (ParamRange{6, 8}));
  EXPECT_EQ(shard_range(10, 4, 3), (ParamRange{8, 10}));
  EXPECT_EQ(shard_range(2, 4, 3).size(), 0u);
}

TEST(MlpModelTest, GradientMatchesFiniteDifferences) {
  MlpModel model(kSmall, 7);
  const int B = 4;
  const auto x = random_vector(B * kSmall.input_dim, 8);
  const auto t = random_vector(B * kSmall.output_dim, 9);
  model.zero_grad();
  model.forward_backward(x, t, B);
  const std::vector<float> analytic(model.grads().begin(), model.grads().end());
  std::vector<float> y(B * kSmall.output_dim);
  auto loss = [&] {
    model.forward(x, B, y);
    return double(mse_loss_forward(y, t, B, kSmall.output_dim));
  };
  EXPECT_GRAD_OK(check_gradient(model.params(), analytic, loss, 1e-2f, 2e-4, 2e-2));
}

// One MoE layer, and two stacked (each adds its aux loss to the objective).
class MoeModelGradient : public ::testing::TestWithParam<int> {};

TEST_P(MoeModelGradient, MatchesFiniteDifferences) {
  MoeModelConfig c;
  c.num_blocks = GetParam();
  c.input_dim = 5;
  c.num_classes = 3;
  c.moe = {.d_model = 6,
           .d_ff = 8,
           .num_experts = 3,
           .top_k = 2,
           .capacity_factor = 0.7f,
           .aux_alpha = 0.3f};
  MoeModel model(c, 10);
  const int B = 8;
  const auto x = random_vector(B * c.input_dim, 11);
  const std::vector<int32_t> labels = {0, 1, 2, 0, 1, 2, 2, 1};
  model.zero_grad();
  model.forward_backward(x, labels, B);
  std::vector<Routing> reference;
  for (int l = 0; l < c.num_blocks; ++l) reference.push_back(model.last_routing(l));
  const std::vector<float> analytic(model.grads().begin(), model.grads().end());
  std::vector<float> logits(B * c.num_classes), probs(logits.size());
  // The objective whose gradient forward_backward returns: mean CE + every layer's aux.
  auto loss = [&] {
    model.forward(x, B, logits);
    return double(softmax_cross_entropy_forward(logits, labels, probs, B, c.num_classes)) +
           model.last_aux_loss();
  };
  auto same = [&] {
    for (int l = 0; l < c.num_blocks; ++l) {
      if (model.last_routing(l).expert != reference[l].expert ||
          model.last_routing(l).row != reference[l].row) {
        return false;
      }
    }
    return true;
  };
  EXPECT_GRAD_OK(check_gradient(model.params(), analytic, loss, 1e-3f, 5e-4, 3e-2, same));
}

INSTANTIATE_TEST_SUITE_P(MoeLayers, MoeModelGradient, ::testing::Values(1, 2),
                         [](const auto& info) { return "L" + std::to_string(info.param); });

// Records the order of hook calls.
struct RecordingHooks : LayerHooks {
  std::vector<std::string> calls;
  void before_forward(int l) override { calls.push_back("bf" + std::to_string(l)); }
  void after_forward(int l) override { calls.push_back("af" + std::to_string(l)); }
  void before_backward(int l) override { calls.push_back("bb" + std::to_string(l)); }
  void after_backward(int l) override { calls.push_back("ab" + std::to_string(l)); }
};

TEST(MlpModelTest, HooksRunAroundEveryLayerInOrder) {
  MlpModel model(kSmall, 1);
  const auto x = random_vector(2 * kSmall.input_dim, 2);
  const auto t = random_vector(2 * kSmall.output_dim, 3);
  RecordingHooks hooks;
  model.forward_backward(x, t, 2, &hooks);
  EXPECT_EQ(hooks.calls, (std::vector<std::string>{"bf0", "af0", "bf1", "af1", "bf2", "af2", "bb2",
                                                   "ab2", "bb1", "ab1", "bb0", "ab0"}));
}

// A hook that checks a layer's gradients are final when after_backward(layer) runs.
struct GradSnapshotHooks : LayerHooks {
  MlpModel* model = nullptr;
  std::vector<std::vector<float>> at_after_backward;
  void after_backward(int l) override {
    const ParamRange r = model->layer_range(l);
    at_after_backward.emplace_back(model->grads().begin() + r.begin,
                                   model->grads().begin() + r.end);
  }
};

TEST(MlpModelTest, LayerGradientsAreFinalAtAfterBackward) {
  MlpModel model(kSmall, 1);
  const auto x = random_vector(3 * kSmall.input_dim, 2);
  const auto t = random_vector(3 * kSmall.output_dim, 3);
  GradSnapshotHooks hooks;
  hooks.model = &model;
  model.zero_grad();
  model.forward_backward(x, t, 3, &hooks);
  for (int l = 0; l < model.num_layers(); ++l) {
    const ParamRange r = model.layer_range(l);
    const std::vector<float> final_grads(model.grads().begin() + r.begin,
                                         model.grads().begin() + r.end);
    EXPECT_EQ(hooks.at_after_backward[model.num_layers() - 1 - l], final_grads);
  }
}

TEST(MlpModelTest, GradScaleSelectsMeanOrSum) {
  MlpModel model(kSmall, 4);
  const int B = 6;
  const auto x = random_vector(B * kSmall.input_dim, 5);
  const auto t = random_vector(B * kSmall.output_dim, 6);
  model.zero_grad();
  model.forward_backward(x, t, B);  // mean
  const std::vector<float> mean(model.grads().begin(), model.grads().end());
  model.zero_grad();
  model.forward_backward(x, t, B, /*grad_scale=*/1.0f);  // sum
  for (size_t i = 0; i < mean.size(); ++i) EXPECT_NEAR(model.grads()[i], B * mean[i], 1e-5);
  // Accumulation: a second call adds the same gradient again.
  model.zero_grad();
  model.forward_backward(x, t, B);
  model.forward_backward(x, t, B);
  for (size_t i = 0; i < mean.size(); ++i) EXPECT_FLOAT_EQ(model.grads()[i], 2 * mean[i]);
}

// The recipe the training issue relies on: each micro-batch's gradient, computed into zeroed
// grads with grad_scale = 1 / global_batch, is the same bits on "rank r" (its own model) as
// in an accumulation loop; summing in rank order then gives identical totals.
TEST(MlpModelTest, DataParallelEqualsGradientAccumulationBitwise) {
  const MlpConfig c{.input_dim = 8, .hidden_dim = 16, .num_blocks = 2, .output_dim = 2};
  const RegressionTask task(c.input_dim, c.output_dim, 5);
  const int global = 12, ranks = 3, micro = global / ranks;
  const float scale = 1.0f / global;

  // Accumulation on one model over the global batch of step 7, in micro-batches.
  MlpModel single(c, 9);
  std::vector<float> x(global * c.input_dim), y(global * c.output_dim);
  task.batch(7, 0, global, x, y);
  std::vector<float> accumulated(single.num_params(), 0.0f);
  for (int m = 0; m < ranks; ++m) {
    single.zero_grad();
    single.forward_backward(std::span(x).subspan(m * micro * c.input_dim, micro * c.input_dim),
                            std::span(y).subspan(m * micro * c.output_dim, micro * c.output_dim),
                            micro, scale);
    for (size_t i = 0; i < accumulated.size(); ++i) accumulated[i] += single.grads()[i];
  }

  // "DDP": each rank has its own model, generates only its slice, then a rank-ordered sum.
  std::vector<float> reduced(single.num_params(), 0.0f);
  for (int r = 0; r < ranks; ++r) {
    MlpModel replica(c, 9);
    std::vector<float> xr(micro * c.input_dim), yr(micro * c.output_dim);
    task.batch(7, r * micro, micro, xr, yr);
    replica.zero_grad();
    replica.forward_backward(xr, yr, micro, scale);
    for (size_t i = 0; i < reduced.size(); ++i) reduced[i] += replica.grads()[i];
  }
  EXPECT_EQ(std::memcmp(accumulated.data(), reduced.data(), reduced.size() * sizeof(float)), 0);
}

// forward_backward_overwrite over garbage grads leaves bitwise what zero_grad then
// forward_backward leaves, in fp32 and mixed bf16, at a small shape and at one that fills
// the AVX2 kernel's whole tiles.
class OverwriteGradsTest : public ::testing::TestWithParam<Precision> {};

TEST_P(OverwriteGradsTest, EqualsZeroGradThenForwardBackwardBitwise) {
  const MlpConfig wide{.input_dim = 64, .hidden_dim = 256, .num_blocks = 1, .output_dim = 4};
  for (const MlpConfig& c : {kSmall, wide}) {
    MlpModel a(c, 5, GetParam()), b(c, 5, GetParam());
    const int B = 16;
    const auto x = random_vector(B * c.input_dim, 6), t = random_vector(B * c.output_dim, 7);
    a.zero_grad();
    const float loss_a = a.forward_backward(x, t, B, 0.25f);
    if (GetParam() == Precision::kFp32) {
      std::fill(b.grads().begin(), b.grads().end(), std::nanf(""));
    } else {
      std::span<BFloat16> g = b.store().grads_bf16();
      std::fill(g.begin(), g.end(), BFloat16(std::nanf("")));
    }
    const float loss_b = b.forward_backward_overwrite(x, t, B, 0.25f);
    EXPECT_EQ(loss_a, loss_b);
    const std::vector<float> ga = a.store().grads_as_float(), gb = b.store().grads_as_float();
    ASSERT_EQ(ga.size(), gb.size());
    EXPECT_EQ(std::memcmp(ga.data(), gb.data(), ga.size() * sizeof(float)), 0)
        << "hidden " << c.hidden_dim;
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, OverwriteGradsTest,
                         ::testing::Values(Precision::kFp32, Precision::kMixedBf16),
                         [](const ::testing::TestParamInfo<Precision>& info) {
                           return std::string(info.param == Precision::kFp32 ? "Fp32" : "Bf16");
                         });

// forward_backward_sgd, the SGD step applied inside backward, leaves bitwise the parameters
// forward_backward_overwrite then Sgd::step leave, step after step, and never writes the
// gradients (they stay NaN); at shapes off the kernel's tiles, with several blocks (dx then
// runs through W1 before its update) and with weight decay (the old weight enters).
struct FusedSgdCase {
  const char* name;
  MlpConfig config;
  int batch;
  float weight_decay;
};

void PrintTo(const FusedSgdCase& c, std::ostream* os) { *os << c.name; }

class FusedSgdTest : public ::testing::TestWithParam<FusedSgdCase> {};

TEST_P(FusedSgdTest, EqualsOverwriteThenSgdStepBitwise) {
  const FusedSgdCase& p = GetParam();
  const MlpConfig& c = p.config;
  MlpModel a(c, 5), b(c, 5);
  Sgd sgd(SgdConfig{.lr = 0.05f, .momentum = 0.0f, .weight_decay = p.weight_decay}, a.num_params());
  ASSERT_TRUE(sgd.is_plain());
  std::fill(b.grads().begin(), b.grads().end(), std::nanf(""));
  for (int step = 0; step < 3; ++step) {
    const auto x = random_vector(p.batch * c.input_dim, 6 + step);
    const auto t = random_vector(p.batch * c.output_dim, 16 + step);
    const float grad_scale = 1.0f / static_cast<float>(p.batch);
    const float loss_a = a.forward_backward_overwrite(x, t, p.batch, grad_scale);
    sgd.step(a.params(), a.grads());
    const float loss_b = b.forward_backward_sgd(x, t, p.batch, grad_scale, sgd.plain_update());
    EXPECT_EQ(loss_a, loss_b) << "step " << step;
    ASSERT_EQ(std::memcmp(a.params().data(), b.params().data(), a.num_params() * sizeof(float)), 0)
        << "step " << step;
  }
  for (float g : b.grads()) ASSERT_TRUE(std::isnan(g)) << "a gradient was stored";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, FusedSgdTest,
    ::testing::Values(
        FusedSgdCase{"Small", kSmall, 7, 0.0f}, FusedSgdCase{"SmallDecay", kSmall, 7, 0.01f},
        FusedSgdCase{"ThreeBlocksOffTiles",
                     {.input_dim = 20, .hidden_dim = 50, .num_blocks = 3, .output_dim = 3},
                     13,
                     0.01f},
        FusedSgdCase{"WholeTiles",
                     {.input_dim = 64, .hidden_dim = 256, .num_blocks = 2, .output_dim = 4},
                     64,
                     0.0f}),
    [](const ::testing::TestParamInfo<FusedSgdCase>& info) { return info.param.name; });

TEST(MlpModelTest, MixedPrecisionGradientsTrackFp32) {
  // Same bf16-representable weights in both models; bf16 grads are the fp32 grads rounded.
  MlpModel fp32(kSmall, 12), mixed(kSmall, 12, Precision::kMixedBf16);
  const std::vector<float> w = mixed.store().params_as_float();
  fp32.store().set_params(w);
  const int B = 4;
  const auto x = random_vector(B * kSmall.input_dim, 13);
  const auto t = random_vector(B * kSmall.output_dim, 14);
  fp32.zero_grad();
  mixed.zero_grad();
  const float l32 = fp32.forward_backward(x, t, B);
  const float l16 = mixed.forward_backward(x, t, B);
  EXPECT_EQ(l32, l16);  // activations are fp32 in both; only storage differs
  const std::vector<float> g16 = mixed.store().grads_as_float();
  int changed = 0;
  for (size_t i = 0; i < g16.size(); ++i) {
    EXPECT_EQ(g16[i], static_cast<float>(BFloat16(fp32.grads()[i])));
    changed += g16[i] != fp32.grads()[i];
  }
  EXPECT_GT(changed, 0);  // the gradients really are stored in bf16
}

}  // namespace
}  // namespace dtsim::model
