// The step runner and how results reach rank 0: a RankOutcome survives its byte encoding,
// on_step sees every step's global loss as the RunResult reports it, and the reporting
// channel's own traffic stays out of the counters and flight record of training.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "train/rank_outcome.h"
#include "train_test_util.h"

namespace dtsim::train {
namespace {

TEST(RankOutcome, SurvivesItsEncoding) {
  TrainConfig c = mlp_config(Strategy::kZero3, 3);
  c.trace = true;
  const RunResult r = run_training(c);
  RankOutcome o;
  o.report = r.ranks[1];
  o.step_seconds = {0.5, 0.25};
  o.losses = r.losses;
  o.params = r.params;
  ASSERT_FALSE(o.report.flight.empty());
  ASSERT_FALSE(o.report.timeline.empty());
  const RankOutcome back = decode(encode(o));
  EXPECT_EQ(back.report.rank, 1);
  EXPECT_EQ(back.report.memory, o.report.memory);
  EXPECT_EQ(0, std::memcmp(&back.report.counters.by_op, &o.report.counters.by_op,
                           sizeof(o.report.counters.by_op)));
  ASSERT_FALSE(o.report.counters.groups.empty());
  ASSERT_EQ(back.report.counters.groups.size(), o.report.counters.groups.size());
  for (size_t g = 0; g < o.report.counters.groups.size(); ++g) {
    const GroupTraffic &a = back.report.counters.groups[g], &b = o.report.counters.groups[g];
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.ranks, b.ranks);
    ASSERT_EQ(a.peers.size(), b.peers.size());
    EXPECT_EQ(0, std::memcmp(a.peers.data(), b.peers.data(), b.peers.size() * sizeof(PeerTraffic)));
  }
  ASSERT_EQ(back.report.flight.size(), o.report.flight.size());
  for (size_t i = 0; i < o.report.flight.size(); ++i) {
    EXPECT_EQ(describe(back.report.flight[i]), describe(o.report.flight[i]));
  }
  ASSERT_EQ(back.report.timeline.size(), o.report.timeline.size());
  EXPECT_EQ(back.report.timeline.back().name, o.report.timeline.back().name);
  EXPECT_EQ(back.report.timeline.back().end, o.report.timeline.back().end);
  EXPECT_EQ(back.step_seconds, o.step_seconds);
  EXPECT_EQ(back.losses, o.losses);
  EXPECT_EQ(back.params, o.params);
  std::vector<std::byte> cut = encode(o);
  cut.pop_back();
  EXPECT_THROW(decode(cut), Error);
}

class OnStep : public ::testing::TestWithParam<Strategy> {};

// The loss each step reports as it finishes is the loss the run returns, bit for bit, and
// it arrives on one thread, once per step, in order.
TEST_P(OnStep, CarriesEachStepsGlobalLoss) {
  TrainConfig c =
      GetParam() == Strategy::kEp ? moe_config(GetParam(), 4) : mlp_config(GetParam(), 4);
  std::vector<double> seen;
  c.on_step = [&](int done, double loss) {
    EXPECT_EQ(done, static_cast<int>(seen.size()) + 1);
    seen.push_back(loss);
  };
  const RunResult r = run_training(c);
  EXPECT_EQ(seen, r.losses);
}

INSTANTIATE_TEST_SUITE_P(Strategies, OnStep,
                         ::testing::Values(Strategy::kSingle, Strategy::kAccum, Strategy::kDdp,
                                           Strategy::kZero1, Strategy::kZero3, Strategy::kTp,
                                           Strategy::kEp, Strategy::kDpTp),
                         [](const auto& info) {
                           std::string s = to_string(info.param);
                           std::erase(s, '-');
                           return s;
                         });

// The per-step loss all_gather and the final gather are reporting: counted apart, absent
// from the flight record, and the training counters hold DDP's all-reduces alone.
TEST(ReportChannel, KeepsItsTrafficOutOfTheTrainingCounters) {
  TrainConfig c = mlp_config(Strategy::kDdp, 4);
  c.bucket_bytes = 0;  // one all_reduce per step
  const RunResult r = run_training(c);
  for (const RankReport& rank : r.ranks) {
    EXPECT_EQ(rank.counters.total().calls, uint64_t(c.steps));
    EXPECT_EQ(rank.counters[OpKind::kAllReduce].calls, uint64_t(c.steps));
    EXPECT_EQ(rank.reporting[OpKind::kAllGather].calls, uint64_t(c.steps));
    EXPECT_GT(rank.reporting.total().bytes_sent, 0u);
    for (const FlightEntry& e : rank.flight) EXPECT_EQ(e.comm_name, "world") << describe(e);
    // Per communicator and peer too: only the world's training traffic, summing to the total.
    uint64_t sent = 0;
    for (const GroupTraffic& g : rank.counters.groups) {
      EXPECT_EQ(g.name, "world");
      for (const PeerTraffic& p : g.peers) sent += p.bytes_sent;
    }
    EXPECT_EQ(sent, rank.counters.total().bytes_sent);
  }
}

}  // namespace
}  // namespace dtsim::train
