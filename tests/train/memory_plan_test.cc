// Memory before work (issue 32): the expected peak per rank from the placements, and the
// refusal of a run that cannot fit before any of it starts.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "train/memory_plan.h"
#include "train_test_util.h"

namespace dtsim::train {
namespace {

int64_t measured_peak(const RankReport& r) {
  int64_t total = 0;
  for (int64_t b : r.memory) total += b;
  return total;
}

struct PlanCase {
  const char* name;
  Strategy strategy;
  int zero;
  ModelKind model;
};

class MemoryPlanTest : public ::testing::TestWithParam<PlanCase> {};

// The plan bounds what the run measures, and not by more than 3x (activations are a bound).
TEST_P(MemoryPlanTest, BoundsTheMeasuredPeakOfEveryRank) {
  const PlanCase p = GetParam();
  TrainConfig c =
      with_adam(p.model == ModelKind::kMlp ? mlp_config(p.strategy, 4) : moe_config(p.strategy, 4));
  c.zero = p.zero;
  if (p.strategy == Strategy::kMesh) {
    c.widths.dp = 2;
    c.widths.tp = p.model == ModelKind::kMlp ? 2 : 1;
    c.widths.ep = p.model == ModelKind::kMoe ? 2 : 1;
    c.ranks = c.widths.dp * c.widths.tp;
  }
  const MemoryPlan plan = plan_memory(c);
  const RunResult run = run_training(c);
  ASSERT_EQ(plan.rank_bytes.size(), run.ranks.size());
  for (size_t r = 0; r < run.ranks.size(); ++r) {
    const int64_t measured = measured_peak(run.ranks[r]);
    EXPECT_GE(plan.rank_bytes[r], measured) << "rank " << r;
    EXPECT_LE(plan.rank_bytes[r], 3 * measured) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, MemoryPlanTest,
    ::testing::Values(PlanCase{"ddp", Strategy::kDdp, 0, ModelKind::kMlp},
                      PlanCase{"zero3", Strategy::kZero3, 0, ModelKind::kMlp},
                      PlanCase{"dp2_tp2_zero1", Strategy::kMesh, 1, ModelKind::kMlp},
                      PlanCase{"moe_dp2_ep2_zero2", Strategy::kMesh, 2, ModelKind::kMoe}),
    [](const auto& info) { return std::string(info.param.name); });

// About 70 GB on a 24 GB machine: refused in validate(), at once, naming both numbers.
TEST(MemoryPlan, ARunThatCannotFitIsRefusedBeforeItStarts) {
  TrainConfig c = moe_config(Strategy::kDdp, 4);
  c.moe.moe.d_model = 4096;
  c.moe.input_dim = 4096;
  c.moe.moe.d_ff = 65536;
  if (plan_memory(c).process_bytes < available_memory()) GTEST_SKIP() << "a machine this large";
  const auto start = std::chrono::steady_clock::now();
  try {
    validate(c);
    FAIL() << "accepted";
  } catch (const UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("GB is available"), std::string::npos) << what;
    EXPECT_NE(what.find("needs about"), std::string::npos) << what;
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 1.0);
}

}  // namespace
}  // namespace dtsim::train
