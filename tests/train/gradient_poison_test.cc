// No step runner relies on the gradients a previous step left: each step's first micro-batch
// writes them (MicroBatch::write_grads, a pipeline chunk's first weight-gradient action, the
// ZeRO-3 shard's first reduce-scatter) instead of a zero_grad pass. With
// TrainConfig::poison_gradients every gradient buffer holds NaN when a step begins, so a
// runner that adds into last step's gradients ends in NaN; the run must be bitwise the run
// without it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "pipeline_test_util.h"
#include "train/launch.h"
#include "train/step_runner.h"
#include "train/trainee.h"
#include "train_test_util.h"

namespace dtsim::train {
namespace {

using pipeline::ScheduleKind;
using pipeline::ScheduleSpec;

struct PoisonCase {
  std::string name;
  TrainConfig config;
};
void PrintTo(const PoisonCase& c, std::ostream* os) { *os << c.name; }

TrainConfig micro(TrainConfig c, int m) {
  c.micro_batches = m;
  return c;
}

// Enough experts that some get no token in a micro-batch (their gradients must still be 0).
TrainConfig many_experts(TrainConfig c) {
  c.moe.moe.num_experts = 12;
  return c;
}

TrainConfig mesh(int dp, int tp, int zero, int m) {
  TrainConfig c = micro(mlp_config(Strategy::kMesh, dp * tp), m);
  c.widths.dp = dp;
  c.widths.tp = tp;
  c.zero = zero;
  return c;
}

TrainConfig piped(ScheduleSpec spec, int dp, int zero, bool moe = false, int ep = 1) {
  TrainConfig c = moe ? moe_config(Strategy::kMesh, dp * spec.stages)
                      : mlp_config(Strategy::kMesh, dp * spec.stages);
  c.widths.tp = 1;
  c.widths.ep = ep;
  c.mlp.num_blocks = c.moe.num_blocks = spec.stages * spec.virtual_stages;
  return pipeline::pipeline_config(c, spec, dp, zero, model::Precision::kFp32);
}

std::vector<PoisonCase> cases() {
  TrainConfig accum = micro(mlp_config(Strategy::kAccum, 2), 2);
  TrainConfig dp_tp_zero3 = micro(mlp_config(Strategy::kDpTp, 4), 2);
  dp_tp_zero3.zero = 3;
  return {
      {"single", mlp_config(Strategy::kSingle, 1)},
      {"single_moe", many_experts(moe_config(Strategy::kSingle, 1))},
      {"accum_groups2_micro2", accum},
      {"ddp_micro2", micro(mlp_config(Strategy::kDdp, 4), 2)},
      {"ddp_micro2_bf16", with_bf16(micro(mlp_config(Strategy::kDdp, 4), 2))},
      {"ddp_moe_micro2", many_experts(micro(moe_config(Strategy::kDdp, 4), 2))},
      {"zero1_micro2", micro(mlp_config(Strategy::kZero1, 4), 2)},
      {"zero2_micro2", micro(mlp_config(Strategy::kZero2, 4), 2)},
      {"zero3_micro2", micro(mlp_config(Strategy::kZero3, 4), 2)},
      {"zero3_micro2_bf16", with_bf16(micro(mlp_config(Strategy::kZero3, 3), 2))},
      {"tp", mlp_config(Strategy::kTp, 2)},
      {"dp_tp_zero3_micro2", dp_tp_zero3},
      {"mesh_dp2_tp2_zero1_micro2", mesh(2, 2, 1, 2)},
      {"ep_micro2", many_experts(micro(moe_config(Strategy::kEp, 4), 2))},
      {"ep_micro2_bf16", with_bf16(many_experts(micro(moe_config(Strategy::kEp, 2), 2)))},
      {"pipeline_1f1b", piped({ScheduleKind::kOneFOneB, 2, 4, 1}, 1, 0)},
      {"pipeline_interleaved", piped({ScheduleKind::kInterleaved, 2, 4, 2}, 1, 0)},
      {"pipeline_zb_h1", piped({ScheduleKind::kZeroBubbleH1, 2, 4, 1}, 1, 0)},
      {"pipeline_dp2_zero1", piped({ScheduleKind::kOneFOneB, 2, 4, 1}, 2, 1)},
      {"pipeline_moe_dp2_ep2", piped({ScheduleKind::kGpipe, 2, 4, 1}, 2, 0, true, 2)},
  };
}

class GradientPoison : public ::testing::TestWithParam<PoisonCase> {};

TEST_P(GradientPoison, StepsWriteTheirGradientsBitwise) {
  const TrainConfig clean = GetParam().config;
  TrainConfig poisoned = clean;
  poisoned.poison_gradients = true;
  const RunResult want = run_training(clean);
  const RunResult got = run_training(poisoned);
  ASSERT_EQ(got.params.size(), want.params.size());
  ASSERT_FALSE(want.params.empty());
  for (float p : want.params) ASSERT_TRUE(std::isfinite(p));
  EXPECT_EQ(std::memcmp(got.params.data(), want.params.data(), want.params.size() * sizeof(float)),
            0)
      << "parameters differ when the gradients start as NaN: a step read stale gradients";
  EXPECT_EQ(got.losses, want.losses);
}

INSTANTIATE_TEST_SUITE_P(Runners, GradientPoison, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

// A runner that adds every micro-batch into the gradients (never writes them): the poison
// reaches it, so the test above can fail.
template <class T>
class AccumulatesOnly : public RankStrategy {
 public:
  AccumulatesOnly(Trainee& trainee, std::span<T> /*params*/, std::span<T> /*grads*/)
      : trainee_(trainee) {}
  std::vector<MicroBatch> micro_batches() const override {
    return {{.first = 0, .size = 8, .grad_scale = 0.125f}};
  }
  float forward_backward(int step, const MicroBatch& mb) override {
    return trainee_.forward_backward(step, mb.first, mb.size, mb.grad_scale);
  }
  void optimizer_step() override {}
  void observe_memory(PeakMemory& /*peak*/) override {}
  std::vector<float> final_params() override { return trainee_.store().grads_as_float(); }

 private:
  Trainee& trainee_;
};

TEST(GradientPoison, ReachesARunnerThatOnlyAccumulates) {
  TrainConfig c = mlp_config(Strategy::kSingle, 1);
  c.poison_gradients = true;
  StepRunner runner(c, nullptr);
  Trainee trainee(c);
  run_rank<AccumulatesOnly>(runner, trainee, trainee);
  const std::vector<float> grads = runner.take_outcome().params;
  ASSERT_FALSE(grads.empty());
  for (float g : grads) EXPECT_TRUE(std::isnan(g));
}

}  // namespace
}  // namespace dtsim::train
