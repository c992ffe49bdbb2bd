// The flight recorder: every collective of the last run, per rank, with its sequence
// number, fingerprint, state and timings; a fixed-size ring that keeps the newest calls.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "runtime/communicator.h"
#include "runtime/diagnostics/flight_recorder.h"
#include "runtime/world.h"

namespace dtsim {
namespace {

TEST(FlightRecorder, RecordsEveryCollectiveWithItsFingerprint) {
  World world(4);
  world.run([](Communicator& c) {
    std::vector<float> x(100, 1.0f);
    c.all_reduce(std::span<float>(x), ReduceOp::kMax, Algo::kRing);
    c.broadcast(std::span<float>(x), 2);
    std::vector<float> out(25);
    c.reduce_scatter(std::span<const float>(x), std::span<float>(out));
    c.barrier();
    auto g = c.new_group({0, 1});  // an all_reduce on the world, then the group's own calls
    if (g) g->all_reduce(std::span<float>(x));
  });
  for (int r = 0; r < 4; ++r) {
    const auto e = world.flight_record(r);
    ASSERT_EQ(e.size(), r < 2 ? 6u : 5u) << "rank " << r;
    for (size_t i = 0; i < 5; ++i) {
      EXPECT_EQ(e[i].seq, i);
      EXPECT_EQ(e[i].comm_name, "world");
      EXPECT_EQ(e[i].state, CallState::kDone);
      EXPECT_LE(e[i].start, e[i].end);
    }
    EXPECT_EQ(e[0].sig.op, OpKind::kAllReduce);
    EXPECT_EQ(e[0].sig.count, 100u);
    EXPECT_EQ(e[0].sig.reduce, ReduceOp::kMax);
    EXPECT_EQ(e[0].sig.algo, Algo::kRing);
    EXPECT_EQ(e[0].bytes_sent, 2u * 3u * 25u * sizeof(float));  // ring: 2(N-1) chunks
    EXPECT_EQ(e[1].sig.op, OpKind::kBroadcast);
    EXPECT_EQ(e[1].sig.root, 2);
    EXPECT_EQ(e[2].sig.op, OpKind::kReduceScatter);
    EXPECT_EQ(e[3].sig.op, OpKind::kBarrier);
    if (r < 2) {
      EXPECT_EQ(e[5].comm_name, "group[0,1]");
      EXPECT_EQ(e[5].seq, 0u);
    }
    EXPECT_NE(describe(e[0]).find("world#0 all_reduce(numel=100"), std::string::npos)
        << describe(e[0]);
  }
}

// A failed call is not a completed one: the desync report's "last completed" skips it. (A
// rank whose call timed out and returned before another rank's report was written showed
// the failed call there, and Watchdog.ReportNamesLastSeqBlockedCallAndTheMissingRank
// failed now and then under load.)
TEST(FlightRecorder, LastDoneSkipsFailedCalls) {
  FlightRecorder fr;
  Signature sig;
  sig.op = OpKind::kAllReduce;
  FlightEntry e;
  EXPECT_FALSE(fr.last_done(&e));
  fr.begin(1, "world", 0, sig);
  fr.end(CallState::kDone, 0);
  fr.begin(1, "world", 1, sig);
  fr.end(CallState::kFailed, 0);
  ASSERT_TRUE(fr.last_done(&e));
  EXPECT_EQ(e.seq, 0u);
  EXPECT_EQ(e.state, CallState::kDone);
  fr.begin(1, "world", 2, sig);  // running: not done either
  ASSERT_TRUE(fr.last_done(&e));
  EXPECT_EQ(e.seq, 0u);
}

TEST(FlightRecorder, RingKeepsTheNewestCallsAndResetsPerRun) {
  World world(2);
  const int calls = static_cast<int>(FlightRecorder::kDepth) + 36;
  world.run([&](Communicator& c) {
    for (int i = 0; i < calls; ++i) c.barrier();
  });
  auto e = world.flight_record(1);
  ASSERT_EQ(e.size(), FlightRecorder::kDepth);
  EXPECT_EQ(e.front().seq, 36u);
  EXPECT_EQ(e.back().seq, static_cast<uint64_t>(calls - 1));
  world.run([](Communicator& c) { c.barrier(); });
  e = world.flight_record(0);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].seq, 0u);
}

// Rank 0 gives up only once ranks 1 and 2 have finished the first call: finishing its own
// share does not mean they have theirs, and the abort releases a rank still waiting in the
// first call with that call failed (seen under TSan: ranks 1 and 2 recorded one call).
TEST(FlightRecorder, FailedCallIsMarkedAndInTheReport) {
  WorldOptions o;
  o.timeout = std::chrono::milliseconds(2000);
  World world(3, o);
  std::atomic<int> finished_first{0};
  EXPECT_THROW(world.run([&](Communicator& c) {
    std::vector<int32_t> x(7, 1);
    c.all_reduce(std::span<int32_t>(x));
    if (c.rank() != 0) {
      finished_first.fetch_add(1);
      c.all_reduce(std::span<int32_t>(x));
      return;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (finished_first.load() < 2 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::yield();
    ASSERT_EQ(finished_first.load(), 2) << "ranks 1 and 2 did not finish the first call";
    throw std::runtime_error("rank 0 gives up");
  }),
               RankFailure);
  for (int r = 1; r < 3; ++r) {
    const auto e = world.flight_record(r);
    ASSERT_EQ(e.size(), 2u);
    EXPECT_EQ(e[0].state, CallState::kDone);
    EXPECT_EQ(e[1].state, CallState::kFailed);
  }
  const std::string report = world.desync_report();
  EXPECT_NE(report.find("rank 0: last completed world#0 all_reduce(numel=7"), std::string::npos)
      << report;
}

}  // namespace
}  // namespace dtsim
