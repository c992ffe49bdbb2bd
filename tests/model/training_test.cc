// The MLP and the MoE model each cut their training loss at least tenfold on the synthetic
// teacher task within a few hundred single-rank steps (fresh samples every step; Adam with a
// learning rate decaying linearly to zero). "Tenfold" compares the loss of the first step with
// the mean of the last 20 steps.
#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

#include "model/data.h"
#include "model/mlp.h"
#include "model/moe_model.h"
#include "model/optimizer.h"

namespace dtsim::model {
namespace {

constexpr int kSteps = 300;
constexpr int kBatch = 64;

constexpr float kLr = 1e-2f;

// Learning rate of `step`: linear decay from kLr to zero.
float lr_at(int step) { return kLr * (1.0f - float(step) / kSteps); }

// Mean of the last `n` entries.
float tail_mean(const std::vector<float>& v, int n) {
  double s = 0;
  for (int i = 0; i < n; ++i) s += v[v.size() - 1 - i];
  return float(s / n);
}

std::vector<float> train_mlp(Precision precision) {
  const MlpConfig c{.input_dim = 16, .hidden_dim = 64, .num_blocks = 2, .output_dim = 4};
  MlpModel model(c, /*seed=*/1, precision);
  const RegressionTask task(c.input_dim, c.output_dim, /*seed=*/2);
  const AdamConfig ac{.lr = kLr};
  const bool mixed = precision == Precision::kMixedBf16;
  Adam adam = mixed ? Adam(ac, model.store().params_bf16(), &model.memory())
                    : Adam(ac, model.num_params(), &model.memory());
  std::vector<float> x(kBatch * c.input_dim), y(kBatch * c.output_dim), losses;
  for (int step = 0; step < kSteps; ++step) {
    task.batch(step, 0, kBatch, x, y);
    model.zero_grad();
    losses.push_back(model.forward_backward(x, y, kBatch));
    adam.set_lr(lr_at(step));
    if (mixed) {
      adam.step(model.store().params_bf16(), model.store().grads_bf16());
    } else {
      adam.step(model.params(), model.grads());
    }
  }
  return losses;
}

TEST(TrainingTest, MlpCutsLossTenfold) {
  const std::vector<float> losses = train_mlp(Precision::kFp32);
  const float first = losses.front(), last = tail_mean(losses, 20);
  std::printf("mlp fp32: loss %.4f -> %.5f (%.1fx)\n", first, last, first / last);
  EXPECT_GE(first / last, 10.0f);
}

TEST(TrainingTest, MixedPrecisionMlpCutsLossTenfold) {
  const std::vector<float> losses = train_mlp(Precision::kMixedBf16);
  const float first = losses.front(), last = tail_mean(losses, 20);
  std::printf("mlp bf16: loss %.4f -> %.5f (%.1fx)\n", first, last, first / last);
  EXPECT_GE(first / last, 10.0f);
}

class MoeTrainingTest : public ::testing::TestWithParam<int> {};

TEST_P(MoeTrainingTest, MoeCutsLossTenfold) {
  MoeModelConfig c;
  c.input_dim = 16;
  c.num_classes = 4;
  c.moe = {.d_model = 32,
           .d_ff = 64,
           .num_experts = 4,
           .top_k = GetParam(),
           .capacity_factor = 1.25f,
           .aux_alpha = 0.01f};
  MoeModel model(c, /*seed=*/3);
  const ClassificationTask task(c.input_dim, c.num_classes, /*seed=*/4);
  Adam adam({.lr = kLr}, model.num_params(), &model.memory());
  std::vector<float> x(kBatch * c.input_dim), losses;
  std::vector<int32_t> labels(kBatch);
  for (int step = 0; step < kSteps; ++step) {
    task.batch(step, 0, kBatch, x, labels);
    model.zero_grad();
    losses.push_back(model.forward_backward(x, labels, kBatch));
    adam.set_lr(lr_at(step));
    adam.step(model.params(), model.grads());
  }
  const float first = losses.front(), last = tail_mean(losses, 20);
  std::printf("moe top-%d: loss %.4f -> %.5f (%.1fx), aux %.4f\n", GetParam(), first, last,
              first / last, model.last_aux_loss());
  EXPECT_GE(first / last, 10.0f);
}

INSTANTIATE_TEST_SUITE_P(TopK, MoeTrainingTest, ::testing::Values(1, 2),
                         [](const auto& info) { return "top" + std::to_string(info.param); });

}  // namespace
}  // namespace dtsim::model
