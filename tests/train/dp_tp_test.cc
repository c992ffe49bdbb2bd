// DP x TP on a 2-D grid: the subgroups Communicator::split builds, then whole training on
// 4 ranks as 2 x 2 and 8 ranks as 4 x 2 against single-rank training, with collective counts.
#include <gtest/gtest.h>

#include <iostream>
#include <vector>

#include "runtime/world.h"
#include "train/strategies.h"
#include "train/tp_grid.h"
#include "train_test_util.h"

namespace dtsim::train {
namespace {

TEST(DpTpGrid, TpGroupsAreConsecutiveRanksAndDpGroupsRunAcrossThem) {
  const int N = 8, T = 2;
  std::vector<std::vector<int>> tp(N), dp(N);
  std::vector<int> replica(N);
  World world(N);
  world.run([&](Communicator& comm) {
    TpGrid g = make_tp_grid(comm, T);
    tp[comm.rank()] = g.tp->ranks();
    dp[comm.rank()] = g.dp->ranks();
    replica[comm.rank()] = g.dp_index;
  });
  for (int r = 0; r < N; ++r) {
    EXPECT_EQ(tp[r], (std::vector<int>{r / T * T, r / T * T + 1}));
    EXPECT_EQ(dp[r], (std::vector<int>{r % T, r % T + 2, r % T + 4, r % T + 6}));
    EXPECT_EQ(replica[r], r / T);
  }
}

struct DpTpCase {
  int ranks, tp;
  model::OptimizerKind opt;
  model::Precision precision;
};

class DpTpTraining : public ::testing::TestWithParam<DpTpCase> {};

TEST_P(DpTpTraining, MatchesSingleRankTrainingAfterKSteps) {
  const DpTpCase p = GetParam();
  TrainConfig c;
  c.strategy = Strategy::kDpTp;
  c.ranks = p.ranks;
  c.tp_size = p.tp;
  c.steps = 8;
  c.global_batch = 16;
  c.optimizer = p.opt;
  c.lr = p.opt == model::OptimizerKind::kAdam ? 1e-2f : 5e-2f;
  c.precision = p.precision;
  c.algo = Algo::kRing;
  c.mlp = {.input_dim = 16, .hidden_dim = 32, .num_blocks = 2, .output_dim = 4};
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
                      DpTpCase{4, 2, model::OptimizerKind::kAdam, model::Precision::kMixedBf16}));

}  // namespace
}  // namespace dtsim::train
