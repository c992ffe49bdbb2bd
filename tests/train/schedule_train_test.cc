// The training strategies under the controlled scheduler (runtime/schedule): DDP buckets,
// ZeRO-1/2/3 shards and gathers, TP, EP's all_to_all, DP x TP and a 1F1B pipeline run with one rank
// thread at a time, interleaved by PCT, and pass the same check as their free-running tests
// (train/check.h: bitwise against accumulation under the deterministic reduction, else
// within tolerance of the reference).
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "runtime/mutants/mutants.h"
#include "runtime/schedule/scheduler.h"
#include "train/check.h"
#include "train/strategies.h"
#include "train_test_util.h"

namespace dtsim::train {
namespace {

struct ScheduledCase {
  const char* name;
  TrainConfig config;
};

class UnderScheduler : public ::testing::TestWithParam<ScheduledCase> {};

TEST_P(UnderScheduler, PassesItsCheckOnEverySchedule) {
  constexpr int kSchedules = 16;
  auto pct = schedule::make_pct(2);
  schedule::Scheduler sched(pct.get());
  for (int s = 0; s < kSchedules; ++s) {
    TrainConfig c = GetParam().config;
    c.steps = 4;
    c.world.scheduler = &sched;
    sched.set_run_seed(1 + s);
    const RunResult run = run_training(c);
    EXPECT_GT(sched.record().choices.size(), 0u);  // it did run under the scheduler
    const CheckResult r = check(c, run);
    EXPECT_TRUE(r.passed) << GetParam().name << " schedule " << s << ": " << r;
  }
}

// The check can fail under the scheduler: a planted wrong chunk in the ring all-reduce.
TEST(UnderScheduler, PlantedRingBugFailsDdpCheck) {
  auto pct = schedule::make_pct(2);
  schedule::Scheduler sched(pct.get());
  TrainConfig c = mlp_config(Strategy::kDdp, 4);
  c.algo = Algo::kRing;
  c.steps = 4;
  c.world.scheduler = &sched;
  c.world.planted = planted(Mutant::kRingWrongChunk);
  sched.set_run_seed(1);
  bool failed = false;
  try {
    failed = !check(c, run_training(c)).passed;
  } catch (const RankFailure&) {
    failed = true;  // uneven chunks: a size mismatch
  }
  EXPECT_TRUE(failed);
}

TrainConfig deterministic(TrainConfig c) {
  c.algo = Algo::kDeterministic;
  c.bucket_bytes = 256;  // several buckets, interleaved
  return c;
}

// Pipeline sends and receives between stages (1F1B, 4 stages, 8 micro-batches).
TrainConfig pipeline_1f1b() {
  TrainConfig c = mlp_config(Strategy::kMesh, 4);
  c.widths.dp = 1;
  c.widths.tp = 1;
  c.widths.pp = 4;
  c.schedule = pipeline::ScheduleKind::kOneFOneB;
  c.mlp.num_blocks = 4;
  c.micro_batches = 8;
  c.global_batch = 64;
  c.algo = Algo::kDeterministic;
  return c;
}

TrainConfig dp_tp(int ranks) {
  TrainConfig c = mlp_config(Strategy::kDpTp, ranks);
  c.widths.tp = 2;
  return c;
}

INSTANTIATE_TEST_SUITE_P(Strategies, UnderScheduler,
                         ::testing::Values(ScheduledCase{"ddp_deterministic",
                                                         deterministic(mlp_config(Strategy::kDdp,
                                                                                  4))},
                                           ScheduledCase{"ddp_ring", mlp_config(Strategy::kDdp, 3)},
                                           ScheduledCase{"zero1", mlp_config(Strategy::kZero1, 4)},
                                           ScheduledCase{"zero2", mlp_config(Strategy::kZero2, 4)},
                                           ScheduledCase{"zero3", mlp_config(Strategy::kZero3, 4)},
                                           ScheduledCase{"tp", mlp_config(Strategy::kTp, 4)},
                                           ScheduledCase{"ep", moe_config(Strategy::kEp, 4)},
                                           ScheduledCase{"dp_tp", dp_tp(4)},
                                           ScheduledCase{"pipeline_1f1b", pipeline_1f1b()}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace dtsim::train
