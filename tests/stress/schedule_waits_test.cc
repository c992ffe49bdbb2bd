// The controlled scheduler on the reliability runtime (issue 15): a receiver of a rank
// that returned fails at once and names it; a cycle of receives is a deadlock naming who
// waits for whom and the schedule; sends beyond the world-wide budget wait under the
// scheduler (a side-effect-free room check) and one collective that cannot fit is a
// deadlock on the budget; the turn deadline is on lack of progress, not on duration; a
// caught error leaves the communicator unusable and the run goes on under the scheduler;
// in a failed world a wait that outlasts the failure does not starve the rank that ends it.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "runtime/communicator.h"
#include "runtime/exchange.h"
#include "runtime/schedule/scheduler.h"
#include "runtime/world.h"
#include "runtime_test_util.h"

namespace dtsim {
namespace {

using std::chrono::milliseconds;

using testing::has;
using testing::with_timeout;

// A World whose ranks run under `strategy` (seeded by `seed`).
struct Controlled {
  explicit Controlled(int ranks, std::unique_ptr<schedule::Strategy> s, WorldOptions o = {},
                      uint64_t seed = 7)
      : strategy(std::move(s)), sched(strategy.get()) {
    sched.set_run_seed(seed);
    o.scheduler = &sched;
    world = std::make_unique<World>(ranks, o);
  }
  template <class Fn>
  std::string failure_of(Fn fn) {
    try {
      world->run(fn);
    } catch (const RankFailure& f) {
      return f.what();
    }
    ADD_FAILURE() << "World::run returned normally";
    return "";
  }
  std::unique_ptr<schedule::Strategy> strategy;
  schedule::Scheduler sched;
  std::unique_ptr<World> world;
};

TEST(ScheduleWaits, AReceiverOfARankThatReturnedFailsAtOnceNamingIt) {
  std::string first;
  for (int i = 0; i < 2; ++i) {  // the same schedule fails the same way
    Controlled c(3, schedule::make_pct(2), with_timeout(milliseconds(60000)));
    const auto t0 = std::chrono::steady_clock::now();
    const std::string what = c.failure_of([](Communicator& comm) {
      int x = 0;
      if (comm.rank() == 2) return;
      comm.recv(std::span<int>(&x, 1), comm.rank() + 1);
    });
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
    EXPECT_TRUE(has(what, "waiting for rank 2, which already returned from its job")) << what;
    if (i == 0) first = what;
    EXPECT_EQ(what, first);
  }
}

TEST(ScheduleWaits, ACycleOfReceivesIsADeadlockNamingWhoWaitsAndTheSchedule) {
  Controlled c(3, schedule::make_random_walk(), with_timeout(milliseconds(60000)));
  const auto t0 = std::chrono::steady_clock::now();
  const std::string what = c.failure_of([](Communicator& comm) {
    int x = 0;
    comm.recv(std::span<int>(&x, 1), (comm.rank() + 1) % 3);
  });
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  EXPECT_TRUE(has(what, "deadlock: no rank can run")) << what;
  EXPECT_TRUE(has(what, "controlled schedule (random walk, run seed 0x7, step ")) << what;
  EXPECT_TRUE(has(what, "rank 0 waits in recv")) << what;
  EXPECT_TRUE(has(what, "for a message from rank 1")) << what;
  EXPECT_TRUE(has(what, "rank 2 waits in recv")) << what;
  EXPECT_TRUE(has(what, "for a message from rank 0")) << what;
}

TEST(ScheduleWaits, SendsBeyondTheBudgetWaitForTheReceiver) {
  // 64 messages of 256 KiB through a 2 MiB budget: the sender blocks in the scheduler on
  // "is there room", and every schedule completes.
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    WorldOptions o = with_timeout(milliseconds(60000));
    o.max_bytes_in_flight = size_t{2} << 20;
    Controlled c(2, schedule::make_pct(2), o, seed);
    c.world->run([&](Communicator& comm) {
      std::vector<float> x(1 << 16);
      for (int i = 0; i < 64; ++i) {
        if (comm.rank() == 0) {
          std::fill(x.begin(), x.end(), float(i));
          comm.send(std::span<const float>(x), 1);
        } else {
          comm.recv(std::span<float>(x), 0);
          ASSERT_EQ(x[12345], float(i));
        }
      }
    });
    EXPECT_EQ(c.world->payload_bytes(), 0u);
  }
}

TEST(ScheduleWaits, ACollectiveThatCannotFitTheBudgetIsADeadlockOnIt) {
  WorldOptions o = with_timeout(milliseconds(60000));
  o.max_bytes_in_flight = size_t{4} << 20;
  o.lend_bytes = SIZE_MAX;
  Controlled c(4, schedule::make_random_walk(), o);
  const std::string what = c.failure_of([](Communicator& comm) {
    std::vector<float> x(1 << 18, 1.0f);
    comm.all_reduce(std::span<float>(x), ReduceOp::kSum, Algo::kDirect);
  });
  EXPECT_TRUE(has(what, "deadlock")) << what;
  EXPECT_TRUE(has(what, "for room in the world-wide budget of payloads in flight")) << what;
}

TEST(ScheduleWaits, TheTurnDeadlineIsOnLackOfProgressNotDuration) {
  // Rank 2 waits for rank 0's last message while ranks 0 and 1 ping-pong for several
  // timeouts: rank 2 waits for its turn all that time, but steps are being taken.
  const milliseconds t(100);
  Controlled c(3, schedule::make_pct(1), with_timeout(t));
  const auto t0 = std::chrono::steady_clock::now();
  c.world->run([&](Communicator& comm) {
    int x = 0;
    if (comm.rank() == 2) {
      comm.recv(std::span<int>(&x, 1), 0);
      EXPECT_EQ(x, 42);
      return;
    }
    // Rank 0 decides when to stop (after 4 timeouts) and tells rank 1 in each ping.
    for (int more = 1; more;) {
      if (comm.rank() == 0) {
        more = std::chrono::steady_clock::now() - t0 < 4 * t;
        comm.send(std::span<const int>(&more, 1), 1);
        comm.recv(std::span<int>(&x, 1), 1);
      } else {
        comm.recv(std::span<int>(&more, 1), 0);
        comm.send(std::span<const int>(&more, 1), 0);
      }
    }
    if (comm.rank() == 0) {
      x = 42;
      comm.send(std::span<const int>(&x, 1), 2);
    }
  });
  // Else the test proves nothing: the run must outlast the deadline several times.
  EXPECT_GT(std::chrono::steady_clock::now() - t0, 3 * t);
}

TEST(ScheduleWaits, ACaughtErrorLeavesTheCommunicatorUnusable) {
  Controlled c(2, schedule::make_pct(2));
  std::string first, second;
  c.world->run([&](Communicator& comm) {
    if (comm.rank() == 1) return;
    int x = 0;
    try {
      comm.recv(std::span<int>(&x, 1), 1);
    } catch (const TimeoutError& e) {
      first = e.what();
    }
    try {
      comm.all_reduce(std::span<int>(&x, 1));
    } catch (const Error& e) {
      second = e.what();
    }
  });
  EXPECT_TRUE(has(first, "which already returned from its job")) << first;
  EXPECT_TRUE(has(second, "the communicator is unusable")) << second;
}

TEST(ScheduleWaits, TheDesyncReportEndsWithTheSchedule) {
  Controlled c(2, schedule::make_random_walk());
  std::string report;
  c.world->run([&](Communicator& comm) {
    int x = 1;
    comm.all_reduce(std::span<int>(&x, 1));
    if (comm.rank() == 0) report = c.world->desync_report();
  });
  EXPECT_TRUE(has(report, "controlled schedule (random walk, run seed 0x7, step ")) << report;
}

// Always the lowest runnable rank, as PCT with rank 0 on top and no change point. Past
// kLimit turns (a run below takes a few dozen) it records that it was starved and picks the
// highest instead, so that a livelock fails the test rather than hanging it.
class LowestFirst : public schedule::Strategy {
 public:
  static constexpr uint64_t kLimit = 10000;
  void begin(int, uint64_t) override {}
  int choose(const std::vector<int>& runnable, int, uint64_t step) override {
    if (step < kLimit) return runnable.front();
    starved = true;
    return runnable.back();
  }
  std::string name() const override { return "lowest first"; }
  bool starved = false;
};

// Rank 0 lends to rank 2 and waits for a message from it that never comes; rank 2 reads the
// lend; rank 1 fails once a message reaches it, from rank 2 (which then releases the lend,
// a scheduling point: rank 2 is runnable, holding its read, when the world fails) or from
// rank 3 (which the lowest-first strategy runs last: rank 2 is then blocked, holding its
// read, in a receive from rank 0 that never comes). Rank 0's wait ends in AbortedError, and
// unwinding it withdraws the lend, which waits for rank 2's read to end whether or not the
// world failed. The strategy always prefers rank 0; woken at every turn, it finds its reader
// still there and blocks again for ever. Rank 2 must get its turn: as a runnable rank before
// the blocked ones, or, blocked, in its round after rank 0's.
class FailedWorldWaits : public ::testing::TestWithParam<bool> {};

TEST_P(FailedWorldWaits, AWaitThatOutlastsAFailureDoesNotStarveTheRankThatEndsIt) {
  const bool reader_blocked = GetParam();
  auto owned = std::make_unique<LowestFirst>();
  LowestFirst* strategy = owned.get();
  WorldOptions o;
  o.lend_bytes = 0;
  Controlled c(reader_blocked ? 4 : 3, std::move(owned), o);
  const Signature sig{OpKind::kSend, DType::kInt32};
  int lent[4] = {1, 2, 3, 4};
  int got = 0;
  const std::string failure = c.failure_of([&](Communicator& comm) {
    Exchange ex(comm, sig);
    int x = 0;
    if (comm.rank() == 0) {
      ex.send_or_lend(2, 0, lent, 4);
      ex.recv_copy(2, 1, &x, 1);  // never sent: ends when the world fails
    } else if (comm.rank() == 1) {
      ex.recv_copy(reader_blocked ? 3 : 2, 0, &x, 1);
      throw Error("rank 1 fails");
    } else if (comm.rank() == 2) {
      Message m = ex.recv(0, 0, 4);
      std::memcpy(&got, m.data + 3 * sizeof(int), sizeof got);
      if (reader_blocked) {
        ex.recv_copy(0, 2, &x, 1);  // never sent: ends when the world fails
      } else {
        ex.send(1, 0, lent, 1);
      }
      ex.release(0, m);
    } else {
      ex.send(1, 0, lent, 1);
    }
  });
  EXPECT_FALSE(strategy->starved) << "livelock: over " << LowestFirst::kLimit << " turns";
  EXPECT_TRUE(has(failure, "rank 1 fails")) << failure;
  EXPECT_EQ(got, 4);
}

INSTANTIATE_TEST_SUITE_P(ScheduleWaits, FailedWorldWaits, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return std::string(info.param ? "ReaderBlocked" : "ReaderRunnable");
                         });

}  // namespace
}  // namespace dtsim
