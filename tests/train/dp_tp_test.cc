// DP x TP on a 2-D grid (its groups: mesh_test.cc): whole training on
// 4 ranks as 2 x 2 and 8 ranks as 4 x 2 against single-rank training, with collective counts.
#include <gtest/gtest.h>

#include <iostream>
#include <vector>

#include "runtime/world.h"
#include "train/strategies.h"
#include "train_test_util.h"

namespace dtsim::train {
namespace {

struct DpTpCase {
  int ranks, tp;
  model::OptimizerKind opt;
  model::Precision precision;
};
// The case's test name (and how gtest prints it): "ranks8_tp2_adam_fp32".
std::ostream& operator<<(std::ostream& os, const DpTpCase& p) {
  return os << "ranks" << p.ranks << "_tp" << p.tp << "_" << opt_name(p.opt) << "_"
            << precision_name(p.precision);
}

class DpTpTraining : public ::testing::TestWithParam<DpTpCase> {};

TEST_P(DpTpTraining, MatchesSingleRankTrainingAfterKSteps) {
  const DpTpCase p = GetParam();
  const TrainConfig c = make_config({.strategy = Strategy::kDpTp,
                                     .ranks = p.ranks,
                                     .tp = p.tp,
                                     .steps = 8,
                                     .batch = 16,
                                     .opt = p.opt,
                                     .precision = p.precision,
                                     .algo = Algo::kRing,
                                     .dim = 16,
                                     .hidden = 32});
  RunResult grid;
  const CheckResult check = run_and_check(c, &grid);  // train/check.h: vs single
  std::cout << "[dp-tp N=" << p.ranks << " tp=" << p.tp
            << (p.opt == model::OptimizerKind::kAdam ? " adam" : " sgd")
            << (p.precision == model::Precision::kMixedBf16 ? " bf16" : " fp32") << "] " << check
            << "\n";
  EXPECT_EQ(check.reference_name, "single");
  EXPECT_TRUE(check.passed) << check;
  for (const RankReport& r : grid.ranks) {
    // Per step: 2L - 1 on the TP group and one gradient all_reduce on the DP group; the two
    // splits cost one all_gather each, once.
    EXPECT_EQ(r.counters[OpKind::kAllReduce].calls, uint64_t(c.steps * (2 * c.mlp.num_blocks)));
    EXPECT_EQ(r.counters[OpKind::kAllGather].calls, 2u);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Grids, DpTpTraining,
    ::testing::Values(DpTpCase{4, 2, model::OptimizerKind::kSgd, model::Precision::kFp32},
                      DpTpCase{4, 2, model::OptimizerKind::kAdam, model::Precision::kFp32},
                      DpTpCase{8, 2, model::OptimizerKind::kAdam, model::Precision::kFp32},
                      DpTpCase{8, 4, model::OptimizerKind::kSgd, model::Precision::kFp32},
                      DpTpCase{4, 2, model::OptimizerKind::kAdam, model::Precision::kMixedBf16}),
    [](const auto& info) { return ::testing::PrintToString(info.param); });

}  // namespace
}  // namespace dtsim::train
