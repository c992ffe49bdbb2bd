// DDP against the references: bitwise equal to accumulation over the same micro-batches
// under the deterministic reduction; within tolerance of single-rank training; the
// forgotten division fails; one all-reduce per bucket; 16 Psi per rank and 2(N-1)/N of the
// gradient bytes sent per step.
#include <gtest/gtest.h>

#include <cstdio>

#include "model/param_layout.h"
#include "train/data_parallel/ddp.h"
#include "train/strategies.h"
#include "train_test_util.h"

namespace dtsim::train {
namespace {

struct BitwiseCase {
  const char* name;
  TrainConfig config;
};
std::ostream& operator<<(std::ostream& os, const BitwiseCase& c) { return os << c.name; }

class DdpBitwise : public ::testing::TestWithParam<BitwiseCase> {};

TEST_P(DdpBitwise, EqualsAccumulationOverTheSameMicroBatches) {
  TrainConfig c = GetParam().config;
  c.algo = Algo::kDeterministic;
  c.bucket_bytes = 256;  // several buckets: bucketing must not change a bit
  const RunResult ddp = *run_ddp(c);
  TrainConfig ref = c;
  ref.strategy = Strategy::kAccum;
  const Comparison cmp = compare(ddp, run_accum(ref), 0, 0);
  EXPECT_TRUE(cmp.bitwise_equal) << cmp;
}

TrainConfig micro(TrainConfig c, int m) {
  c.micro_batches = m;
  return c;
}

INSTANTIATE_TEST_SUITE_P(
    Configs, DdpBitwise,
    ::testing::Values(
        BitwiseCase{"mlp_sgd", mlp_config(Strategy::kDdp, 4)},
        BitwiseCase{"mlp_sgd_micro3", micro(mlp_config(Strategy::kDdp, 4), 3)},
        BitwiseCase{"mlp_adam_bf16", with_bf16(with_adam(mlp_config(Strategy::kDdp, 4)))},
        BitwiseCase{"moe_adam", with_adam(moe_config(Strategy::kDdp, 4))},
        BitwiseCase{"moe_sgd_bf16_micro2", micro(with_bf16(moe_config(Strategy::kDdp, 4)), 2)}),
    [](const auto& info) { return std::string(info.param.name); });

class DdpVsSingle : public ::testing::TestWithParam<int> {};

// The brief's world sizes: DDP(N) against one rank on the same global batch, fp32 SGD.
TEST_P(DdpVsSingle, MatchesSingleRankWithinFp32Tolerance) {
  const TrainConfig c = mlp_config(Strategy::kDdp, GetParam());
  TrainConfig single = c;
  single.strategy = Strategy::kSingle;
  const Comparison cmp = compare(*run_ddp(c), run_single(single), kFp32Rtol, kFp32Atol);
  EXPECT_TRUE(cmp.passed) << cmp;
  std::printf("DDP N=%d vs single (fp32 SGD): %s\n", GetParam(),
              ::testing::PrintToString(cmp.max_abs_diff).c_str());
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, DdpVsSingle, ::testing::Values(1, 2, 3, 8, 16),
                         [](const auto& info) { return "ranks" + std::to_string(info.param); });

TEST(Ddp, AdamFp32MatchesSingleRank) {
  const TrainConfig c = with_adam(mlp_config(Strategy::kDdp, 4));
  TrainConfig single = c;
  single.strategy = Strategy::kSingle;
  const Comparison cmp = compare(*run_ddp(c), run_single(single), kFp32Rtol, kFp32Atol);
  EXPECT_TRUE(cmp.passed) << cmp;
}

TEST(Ddp, MixedPrecisionMatchesSingleRankWithinBf16Tolerance) {
  for (TrainConfig c : {with_bf16(mlp_config(Strategy::kDdp, 4)),
                        with_bf16(with_adam(mlp_config(Strategy::kDdp, 4)))}) {
    TrainConfig single = c;
    single.strategy = Strategy::kSingle;
    const Comparison cmp = compare(*run_ddp(c), run_single(single), kBf16Rtol, kBf16Atol);
    EXPECT_TRUE(cmp.passed) << cmp;
  }
}

TEST(Ddp, ForgottenDivisionFailsTheCheck) {
  TrainConfig c = mlp_config(Strategy::kDdp, 4);
  c.pitfall = Pitfall::kForgetDivide;
  TrainConfig single = c;
  single.strategy = Strategy::kSingle;
  const Comparison cmp = compare(*run_ddp(c), run_single(single), kFp32Rtol, kFp32Atol);
  EXPECT_FALSE(cmp.passed) << "DDP without the division by N matched single-rank training: "
                              "the check cannot see the lesson's first pitfall ("
                           << cmp << ")";
  EXPECT_GT(cmp.max_abs_diff, 1e-3) << "the step is N times too large, params must move";
}

TEST(Ddp, OneAllReducePerBucket) {
  TrainConfig c = mlp_config(Strategy::kDdp, 4);
  c.algo = Algo::kRing;
  const model::ParamLayout layout = model::mlp_layout(c.mlp);
  const int layers = layout.num_layers();  // 2 blocks + head
  struct Case {
    size_t bucket_bytes;
    size_t expected;
  };
  // 1 byte: every layer its own bucket; huge: one bucket; 0: the plain unbucketed DDP.
  for (const Case k :
       {Case{1, static_cast<size_t>(layers)}, Case{size_t{1} << 30, 1}, Case{0, 1}}) {
    c.bucket_bytes = k.bucket_bytes;
    const RunResult r = *run_ddp(c);
    EXPECT_EQ(ddp_buckets(layout, 4, k.bucket_bytes).size(), k.bucket_bytes ? k.expected : 0u);
    for (int rank = 0; rank < c.ranks; ++rank) {
      EXPECT_EQ(calls_per_step(r, OpKind::kAllReduce, rank), k.expected)
          << "bucket_bytes " << k.bucket_bytes;
      EXPECT_EQ(r.ranks[rank].counters.total().calls, k.expected * c.steps)
          << "DDP must run no collective besides the gradient all-reduces";
    }
  }
  // A bucket of two layers' worth: the head and the last block together, then block 0.
  const size_t two =
      (layout.layer_range(layers - 1).size() + layout.layer_range(layers - 2).size()) * 4;
  EXPECT_EQ(ddp_buckets(layout, 4, two).size(), 2u);
}

TEST(Ddp, MemoryIs16PsiPerRankAndTrafficIs2NMinus1OverNOfTheGradients) {
  TrainConfig c = with_bf16(with_adam(mlp_config(Strategy::kDdp, 4)));
  c.algo = Algo::kRing;
  c.bucket_bytes = 1024;
  const RunResult r = *run_ddp(c);
  const double psi = static_cast<double>(model::mlp_layout(c.mlp).size());
  const double n = c.ranks;
  const double grad_bytes = 2 * psi;
  double total = 0;
  for (const RankReport& rank : r.ranks) {
    EXPECT_EQ(static_bytes(rank), 16 * psi);
    EXPECT_EQ(category(rank, model::MemoryCategory::kWeights), 2 * psi);
    EXPECT_EQ(category(rank, model::MemoryCategory::kGradients), 2 * psi);
    EXPECT_EQ(category(rank, model::MemoryCategory::kMasterWeights), 4 * psi);
    total += static_cast<double>(rank.counters.total().bytes_sent) / r.steps;
  }
  const double formula = 2 * (n - 1) / n * grad_bytes;
  EXPECT_DOUBLE_EQ(total / n, formula) << "mean over ranks";
  EXPECT_NEAR(r.bytes_sent_per_step(), formula, 0.01 * formula) << "busiest rank";
  std::printf("DDP bytes/step/rank measured %.0f (busiest %.0f), formula 2(N-1)/N x %.0f = %.0f\n",
              total / n, r.bytes_sent_per_step(), grad_bytes, formula);
}

TEST(Ddp, TraceRecordsPhasesAndCollectives) {
  TrainConfig c = mlp_config(Strategy::kDdp, 2);
  c.trace = true;
  c.bucket_bytes = 1;
  const RunResult r = *run_ddp(c);
  int forward = 0, backward = 0, optimizer = 0, all_reduce = 0;
  for (const PhaseEvent& e : r.ranks[1].timeline) {
    EXPECT_LE(e.start, e.end) << e.name;
    forward += e.name == "forward";
    backward += e.name == "backward";
    optimizer += e.name == "optimizer";
    if (e.name == "all_reduce") {
      ++all_reduce;
      EXPECT_GT(e.bytes, 0u);
    }
  }
  EXPECT_EQ(forward, c.steps);
  EXPECT_EQ(backward, c.steps);
  EXPECT_EQ(optimizer, c.steps);
  EXPECT_EQ(all_reduce, 3 * c.steps);
  EXPECT_GT(r.seconds_per_step, 0);
}

}  // namespace
}  // namespace dtsim::train
