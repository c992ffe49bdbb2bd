// --recompute through the strategies: selective and full train to bitwise the parameters and
// losses of no recomputation (the recomputed forward of a tensor- or expert-parallel layer runs
// its collectives again, ZeRO-3 recomputes after gathering, pipelines recompute per stage).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "tests/train/pipeline_test_util.h"
#include "tests/train/train_test_util.h"
#include "train/strategies.h"

namespace dtsim::train {
namespace {

struct Case {
  std::string name;
  TrainConfig config;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

TrainConfig deterministic(TrainConfig c) {
  c.algo = Algo::kDeterministic;
  return c;
}

TrainConfig staged(ModelKind model, pipeline::ScheduleKind kind, int layers) {
  TrainConfig c = make_config({.strategy = Strategy::kMesh, .model = model, .ranks = 2});
  c.widths.tp = 1;
  c.mlp.num_blocks = layers;
  c.moe.num_blocks = layers;
  return pipeline::pipeline_config(c, {kind, 2, 4, 1}, 1, 0, model::Precision::kFp32);
}

std::vector<Case> cases() {
  using pipeline::ScheduleKind;
  return {
      {"single_mlp", mlp_config(Strategy::kSingle, 1)},
      {"single_moe", moe_config(Strategy::kSingle, 1)},
      {"ddp_mlp", deterministic(mlp_config(Strategy::kDdp, 2))},
      {"zero3_mlp", deterministic(mlp_config(Strategy::kZero3, 2))},
      {"tp_mlp", mlp_config(Strategy::kTp, 2)},
      {"ep_moe", deterministic(moe_config(Strategy::kEp, 2))},
      {"pp_gpipe_mlp", staged(ModelKind::kMlp, ScheduleKind::kGpipe, 4)},
      {"pp_zbh1_mlp", staged(ModelKind::kMlp, ScheduleKind::kZeroBubbleH1, 4)},
      {"pp_1f1b_moe", staged(ModelKind::kMoe, ScheduleKind::kOneFOneB, 2)},
  };
}

// The largest activation peak of any rank.
int64_t peak_activations(const RunResult& run) {
  int64_t peak = 0;
  for (const RankReport& r : run.ranks) {
    peak = std::max(peak, r.memory[static_cast<int>(model::MemoryCategory::kActivations)]);
  }
  return peak;
}

class RecomputeTraining : public ::testing::TestWithParam<Case> {};

TEST_P(RecomputeTraining, SelectiveAndFullTrainBitwiseAsNone) {
  TrainConfig c = GetParam().config;
  const RunResult none = run_training(c);
  for (model::Recompute r : {model::Recompute::kSelective, model::Recompute::kFull}) {
    c.recompute = r;
    const RunResult got = run_training(c);
    EXPECT_TRUE(compare(got, none, 0, 0).bitwise_equal)
        << model::recompute_name(r) << ": " << compare(got, none, 0, 0);
    // The option reached the stacks: with four micro-batches in flight a stage holds less.
    if (r == model::Recompute::kFull && GetParam().name.starts_with("pp_")) {
      EXPECT_LT(peak_activations(got), peak_activations(none));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Strategies, RecomputeTraining, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace dtsim::train
