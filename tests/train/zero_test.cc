// ZeRO-1/2/3 against the references (bitwise under the deterministic reduction, within
// tolerance otherwise), collective counts per step, per-rank memory beside 4 Psi + 12 Psi/N,
// 2 Psi + 14 Psi/N and 16 Psi/N, and ZeRO-3's traffic at 1.5 times DDP's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "model/param_layout.h"
#include "train/strategies.h"
#include "train_test_util.h"

namespace dtsim::train {
namespace {

const Strategy kStages[] = {Strategy::kZero1, Strategy::kZero2, Strategy::kZero3};

TrainConfig as(TrainConfig c, Strategy s) {
  c.strategy = s;
  return c;
}

TEST(Zero, EveryStageIsBitwiseAccumulationUnderDeterministicReduction) {
  for (const TrainConfig& base :
       {with_adam(mlp_config(Strategy::kAccum, 4)), moe_config(Strategy::kAccum, 4),
        with_bf16(with_adam(mlp_config(Strategy::kAccum, 4)))}) {
    TrainConfig c = base;
    c.algo = Algo::kDeterministic;
    const RunResult accum = run_accum(c);
    for (Strategy s : kStages) {
      const Comparison cmp = compare(*run_zero(as(c, s)), accum, 0, 0);
      EXPECT_TRUE(cmp.bitwise_equal) << to_string(s) << " " << to_string(c.model) << ": " << cmp;
    }
  }
}

TEST(Zero, EveryStageMatchesSingleRankWithSgdAndAdamInFp32AndBf16) {
  struct Case {
    TrainConfig config;
    double rtol, atol;
  };
  const Case cases[] = {
      {mlp_config(Strategy::kSingle, 4), kFp32Rtol, kFp32Atol},
      {with_adam(mlp_config(Strategy::kSingle, 4)), kFp32Rtol, kFp32Atol},
      {with_bf16(mlp_config(Strategy::kSingle, 4)), kBf16Rtol, kBf16Atol},
      {with_bf16(with_adam(mlp_config(Strategy::kSingle, 4))), kBf16Rtol, kBf16Atol},
  };
  for (const Case& k : cases) {
    const RunResult single = run_single(k.config);
    for (Strategy s : kStages) {
      TrainConfig c = as(k.config, s);
      c.algo = Algo::kRing;
      const Comparison cmp = compare(*run_zero(c), single, k.rtol, k.atol);
      EXPECT_TRUE(cmp.passed) << to_string(s) << ": " << cmp;
      std::printf("%s vs single (%s, %s): max |dparam| %.3g, max |dloss| %.3g\n", to_string(s),
                  k.config.optimizer == model::OptimizerKind::kAdam ? "Adam" : "SGD",
                  k.config.precision == model::Precision::kFp32 ? "fp32" : "bf16", cmp.max_abs_diff,
                  cmp.max_loss_diff);
    }
  }
}

// No-sync accumulation over micro-batches: stages 1-2 reduce once (bitwise as DDP); stage 3
// reduce-scatters every micro-batch, a different sum order, so within fp32 tolerance.
TEST(Zero, MicroBatchesMatchAccumulation) {
  TrainConfig c = moe_config(Strategy::kAccum, 4);
  c.micro_batches = 3;
  c.algo = Algo::kDeterministic;
  const RunResult accum = run_accum(c);
  for (Strategy s : kStages) {
    const Comparison cmp = compare(*run_zero(as(c, s)), accum, kFp32Rtol, kFp32Atol);
    EXPECT_TRUE(cmp.passed) << to_string(s) << ": " << cmp;
    if (s != Strategy::kZero3) {
      EXPECT_TRUE(cmp.bitwise_equal) << to_string(s) << ": " << cmp;
    }
  }
}

TEST(Zero, ForgottenDivisionFailsTheCheck) {
  const TrainConfig base = mlp_config(Strategy::kSingle, 4);
  const RunResult single = run_single(base);
  for (Strategy s : kStages) {
    TrainConfig c = as(base, s);
    c.pitfall = Pitfall::kForgetDivide;
    const Comparison cmp = compare(*run_zero(c), single, kFp32Rtol, kFp32Atol);
    EXPECT_FALSE(cmp.passed) << to_string(s) << " without the division by N passed: " << cmp;
  }
}

TEST(Zero, CollectivesPerStep) {
  const TrainConfig base = mlp_config(Strategy::kSingle, 4);
  const int layers = model::mlp_layout(base.mlp).num_layers();
  const RunResult z1 = *run_zero(as(base, Strategy::kZero1));
  const RunResult z2 = *run_zero(as(base, Strategy::kZero2));
  const RunResult z3 = *run_zero(as(base, Strategy::kZero3));
  for (int r = 0; r < base.ranks; ++r) {
    // ZeRO-1 as the paper runs it (section 7): reduce-scatter, then all-gather, like ZeRO-2.
    EXPECT_EQ(calls_per_step(z1, OpKind::kAllReduce, r), 0);
    EXPECT_EQ(calls_per_step(z1, OpKind::kReduceScatter, r), 1);
    EXPECT_EQ(calls_per_step(z1, OpKind::kAllGather, r), 1);
    EXPECT_EQ(calls_per_step(z2, OpKind::kReduceScatter, r), 1);
    EXPECT_EQ(calls_per_step(z2, OpKind::kAllGather, r), 1);
    // ZeRO-3: per layer, one all-gather before forward, one before backward, one
    // reduce-scatter after backward; nothing else.
    EXPECT_EQ(calls_per_step(z3, OpKind::kAllGather, r), 2 * layers);
    EXPECT_EQ(calls_per_step(z3, OpKind::kReduceScatter, r), layers);
    EXPECT_EQ(z3.ranks[r].counters.total().calls, 3u * layers * base.steps);
  }
}

// Mixed-precision Adam on N = 4, Psi not a multiple of 4 (so padding shows).
TEST(Zero, MemoryPerRankMatchesTheFormulas) {
  TrainConfig c = with_bf16(with_adam(mlp_config(Strategy::kSingle, 4)));
  c.mlp.output_dim = 3;
  const model::ParamLayout layout = model::mlp_layout(c.mlp);
  const double psi = static_cast<double>(layout.size()), n = c.ranks;
  ASSERT_NE(layout.size() % 4, 0u);
  const RunResult z1 = *run_zero(as(c, Strategy::kZero1));
  const RunResult z2 = *run_zero(as(c, Strategy::kZero2));
  const RunResult z3 = *run_zero(as(c, Strategy::kZero3));
  const Zero3Layout z3_layout(layout, c.ranks);
  size_t largest = 0;
  for (int l = 0; l < z3_layout.num_layers(); ++l) largest = std::max(largest, z3_layout.padded(l));
  for (int r = 0; r < c.ranks; ++r) {
    // tensor_split shards differ from Psi/N by less than one element.
    EXPECT_NEAR(static_bytes(z1.ranks[r]), 4 * psi + 12 * psi / n, 12) << "rank " << r;
    EXPECT_NEAR(static_bytes(z2.ranks[r]), 2 * psi + 14 * psi / n, 14) << "rank " << r;
    // ZeRO-3: the padded shard of every layer (16 bytes each), plus, at the peak, the one
    // gathered layer's bf16 weights and bf16 gradients (2 + 2 bytes per padded element).
    const double shard = static_cast<double>(z3_layout.shard_size());
    EXPECT_EQ(static_bytes(z3.ranks[r]), 16 * shard + 4 * static_cast<double>(largest));
    EXPECT_NEAR(16 * shard, 16 * psi / n, 16.0 * z3_layout.num_layers()) << "up to padding";
  }
  std::printf(
      "Psi %.0f N 4: ZeRO-1 %lld (4Psi+12Psi/N %.0f), ZeRO-2 %lld (2Psi+14Psi/N %.0f), "
      "ZeRO-3 %lld (16Psi/N %.0f + gathered layer %zu)\n",
      psi, static_cast<long long>(static_bytes(z1.ranks[0])), 4 * psi + 12 * psi / n,
      static_cast<long long>(static_bytes(z2.ranks[0])), 2 * psi + 14 * psi / n,
      static_cast<long long>(static_bytes(z3.ranks[0])), 16 * psi / n, 4 * largest);
}

TEST(Zero, Stage3SendsOneAndAHalfTimesDdp) {
  TrainConfig c = with_bf16(with_adam(mlp_config(Strategy::kDdp, 4)));
  c.algo = Algo::kRing;
  const RunResult ddp = *run_ddp(c);
  const RunResult z3 = *run_zero(as(c, Strategy::kZero3));
  const model::ParamLayout layout = model::mlp_layout(c.mlp);
  const Zero3Layout z3_layout(layout, c.ranks);
  const double n = c.ranks;
  // Ring all-gather and reduce-scatter of equal padded chunks: (N - 1) chunks each.
  EXPECT_EQ(z3.bytes_sent_per_step(), 3 * (n - 1) * 2 * z3_layout.shard_size());
  const double ratio = z3.bytes_sent_per_step() / ddp.bytes_sent_per_step();
  const double padding = n * z3_layout.shard_size() / static_cast<double>(layout.size());
  EXPECT_NEAR(ratio, 1.5 * padding, 1e-9);
  EXPECT_NEAR(ratio, 1.5, 0.02);
  std::printf("bytes/step/rank: DDP %.0f, ZeRO-3 %.0f, ratio %.4f (1.5 x padding %.4f)\n",
              ddp.bytes_sent_per_step(), z3.bytes_sent_per_step(), ratio, padding);
}

TEST(Zero3Segments, EachLayerIsPaddedAndOwnedInContiguousShards) {
  model::ParamLayout layout;
  layout.begin_layer("a");
  layout.add("a.w", 5, 1);  // 5 over 2 ranks: padded to 6, shards of 3
  layout.begin_layer("b");
  layout.add("b.w", 2, 1);
  const Zero3Layout z(layout, 2);
  EXPECT_EQ(z.shard_size(), 4u);
  ASSERT_EQ(z.segments().size(), 2u);
  EXPECT_EQ(zero3_owned(z.segments()[0], 0), (model::ParamRange{0, 3}));
  EXPECT_EQ(zero3_owned(z.segments()[0], 1), (model::ParamRange{3, 5}));
  EXPECT_EQ(zero3_owned(z.segments()[1], 1), (model::ParamRange{6, 7}));
  EXPECT_EQ(z.segments()[1].offset, 3u);
}

// Under expert parallelism a layer's dense and expert runs are separate segments, each
// sharded over its own group.
TEST(Zero3Segments, ExpertRunsShardOverTheirOwnGroup) {
  model::ParamLayout layout;
  layout.begin_layer("moe");
  layout.add("router", 4, 1);
  layout.add("experts", 6, 1);
  const DpParts parts{{{0, 4}}, {{4, 10}}};
  const int sizes[2] = {4, 2};
  const std::vector<Zero3Segment> s = zero3_segments(layout, parts, sizes);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].shard, 1u);
  EXPECT_EQ(s[1].shard, 3u);
  EXPECT_EQ(zero3_owned(s[1], 1), (model::ParamRange{7, 10}));
}

}  // namespace
}  // namespace dtsim::train
