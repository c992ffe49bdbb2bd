// Failures a user can cause and what every rank gets: a rank that skips a collective,
// calls a different one or passes a different length gets a clear error on every rank
// well within the deadline; a collective blocked past its deadline produces the
// watchdog's desync report; a rank that throws releases the others within 100 ms.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "runtime/communicator.h"
#include "runtime/world.h"
#include "runtime_test_util.h"

namespace dtsim {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

using testing::has;

// Runs fn on n ranks; returns each rank's error ("" if none) and the World's failure.
struct Outcome {
  std::vector<std::string> errors;
  std::string failure;
  int failed_rank = -1;
  double seconds = 0;
};

template <class Fn>
Outcome run_catching(int n, milliseconds timeout, Fn fn) {
  WorldOptions o;
  o.timeout = timeout;
  World world(n, o);
  Outcome out;
  out.errors.resize(n);
  const auto t0 = Clock::now();
  try {
    world.run([&](Communicator& c) {
      try {
        fn(c);
      } catch (const std::exception& e) {
        out.errors[c.rank()] = e.what();
        throw;
      }
    });
  } catch (const RankFailure& f) {
    out.failure = f.what();
    out.failed_rank = f.rank();
  }
  out.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return out;
}

constexpr milliseconds kDeadline{5000};

TEST(Desync, DifferentCollectiveFailsEveryRankNamingBothCalls) {
  const Outcome o = run_catching(4, kDeadline, [](Communicator& c) {
    std::vector<float> x(1024, 1.0f);
    if (c.rank() == 2) {
      c.broadcast(std::span<float>(x), 0);
    } else {
      c.all_reduce(std::span<float>(x));
    }
  });
  ASSERT_FALSE(o.failure.empty());
  EXPECT_LT(o.seconds, 1.0) << "must not wait for the deadline";
  for (int r = 0; r < 4; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r) + ": " + o.errors[r]);
    EXPECT_TRUE(has(o.errors[r], "collective mismatch at seq 0: rank "));
    EXPECT_TRUE(has(o.errors[r], "called all_reduce(numel=1024"));
    EXPECT_TRUE(has(o.errors[r], "rank 2 called broadcast(numel=1024"));
    EXPECT_TRUE(has(o.errors[r], "root=0"));
  }
  EXPECT_TRUE(has(o.failure, "collective mismatch at seq 0")) << o.failure;
}

TEST(Desync, DifferentLengthFailsEveryRank) {
  const Outcome o = run_catching(4, kDeadline, [](Communicator& c) {
    std::vector<int32_t> x(c.rank() == 3 ? 1000 : 1024, 1);
    c.all_reduce(std::span<int32_t>(x));
  });
  EXPECT_LT(o.seconds, 1.0);
  for (int r = 0; r < 4; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r) + ": " + o.errors[r]);
    EXPECT_TRUE(has(o.errors[r], "collective mismatch at seq 0"));
    EXPECT_TRUE(has(o.errors[r], "all_reduce(numel=1000"));
    EXPECT_TRUE(has(o.errors[r], "all_reduce(numel=1024"));
  }
}

TEST(Desync, SkippedCollectiveInTheMiddleFailsEveryRank) {
  const Outcome o = run_catching(4, kDeadline, [](Communicator& c) {
    std::vector<double> x(64, 1.0);
    c.all_reduce(std::span<double>(x));
    if (c.rank() != 1) c.all_reduce(std::span<double>(x));  // rank 1 skips seq 1
    c.barrier();
  });
  EXPECT_LT(o.seconds, 1.0);
  for (int r = 0; r < 4; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r) + ": " + o.errors[r]);
    EXPECT_TRUE(has(o.errors[r], "collective mismatch at seq 1: rank "));
    EXPECT_TRUE(has(o.errors[r], "rank 1 called barrier("));
  }
}

TEST(Desync, SkippedLastCollectiveNamesTheRankThatReturned) {
  const Outcome o = run_catching(4, kDeadline, [](Communicator& c) {
    std::vector<float> x(16, 1.0f);
    c.all_reduce(std::span<float>(x));
    if (c.rank() != 3) c.all_reduce(std::span<float>(x));  // rank 3 returns early
  });
  EXPECT_LT(o.seconds, 1.0);
  EXPECT_TRUE(o.errors[3].empty()) << "rank 3 returned normally";
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r) + ": " + o.errors[r]);
    EXPECT_TRUE(has(o.errors[r], "already returned from its job")) << "TimeoutError after 250 ms";
    EXPECT_TRUE(has(o.errors[r], "seq 1"));
  }
  EXPECT_TRUE(has(o.failure, "rank 3, which already returned")) << o.failure;
}

TEST(Desync, SubgroupMismatchIsCaughtToo) {
  const Outcome o = run_catching(4, kDeadline, [](Communicator& c) {
    auto g = c.split(c.rank() % 2, c.rank());
    std::vector<int64_t> x(10, c.rank());
    if (c.rank() == 3) {
      g->broadcast(std::span<int64_t>(x), 1);
    } else {
      g->all_reduce(std::span<int64_t>(x));
    }
  });
  EXPECT_LT(o.seconds, 1.0);
  EXPECT_TRUE(has(o.failure, "collective mismatch at seq 0: rank 1 called all_reduce(numel=10"))
      << o.failure;
  EXPECT_TRUE(has(o.failure, "rank 3 called broadcast(numel=10")) << o.failure;
  EXPECT_TRUE(has(o.failure, "communicator group[1,3]")) << o.failure;
}

// Ranks 0, 1 and 3 enter the second all_reduce only once every rank has finished the first:
// finishing one's own share does not mean the others have theirs, and the report, written
// when the first of them times out, must show every rank's last completed call as the first.
// Released, rank 2 makes the call it was late for: a rank that caught its error has not yet
// failed the world, and a barrier there could meet the others' all_reduce messages at seq 1
// first and fail the run as a mismatch (seen under load: the report was rank 2's mismatch).
TEST(Watchdog, ReportNamesLastSeqBlockedCallAndTheMissingRank) {
  // Rank 2 never reaches the second all_reduce in time: it is busy in its own code.
  std::atomic<bool> released{false};
  std::atomic<int> finished_first{0};
  const Outcome o = run_catching(4, milliseconds(300), [&](Communicator& c) {
    std::vector<float> x(8, 1.0f);
    c.all_reduce(std::span<float>(x));
    finished_first.fetch_add(1);
    if (c.rank() == 2) {
      const auto until = Clock::now() + milliseconds(3000);
      while (!released.load() && Clock::now() < until) std::this_thread::sleep_for(milliseconds(5));
    } else {
      const auto deadline = Clock::now() + std::chrono::seconds(10);
      while (finished_first.load() < 4 && Clock::now() < deadline) std::this_thread::yield();
      ASSERT_EQ(finished_first.load(), 4) << "not every rank finished the first call";
    }
    try {
      c.all_reduce(std::span<float>(x));
    } catch (...) {
      released = true;
      throw;
    }
    c.barrier();
  });
  EXPECT_LT(o.seconds, 2.0);
  EXPECT_TRUE(has(o.failure, "timed out after")) << o.failure;
  EXPECT_TRUE(has(o.failure, "desync report")) << o.failure;
  for (int r : {0, 1, 3}) {
    EXPECT_TRUE(has(o.failure, "rank " + std::to_string(r) + ": last completed world#0 all_reduce"))
        << o.failure;
  }
  EXPECT_TRUE(has(o.failure, "in world#1 all_reduce(numel=8")) << o.failure;
  EXPECT_TRUE(has(o.failure, "rank 2: last completed world#0 all_reduce(numel=8")) << o.failure;
  EXPECT_TRUE(has(o.failure, "not in a collective (running its job)")) << o.failure;
  EXPECT_TRUE(has(o.failure, "lagging or missing rank(s): 2")) << o.failure;
  for (int r = 0; r < 4; ++r) EXPECT_FALSE(o.errors[r].empty()) << "rank " << r;
}

// Rank 5 throws only once every other rank has finished the first all_reduce: finishing its
// own share does not mean they have theirs, and a rank still in the first call when the
// abort lands fails there, outside the try that times its wake-up.
TEST(Abort, ThrowingRankReleasesEveryOtherWithin100ms) {
  constexpr int n = 8;
  std::atomic<int64_t> thrown_at{0};
  std::array<std::atomic<int64_t>, n> woke{};
  std::atomic<int> finished_first{0};
  auto now_ns = [] { return Clock::now().time_since_epoch().count(); };
  WorldOptions opts;
  World world(n, opts);
  try {
    world.run([&](Communicator& c) {
      std::vector<float> x(4096, 1.0f);
      c.all_reduce(std::span<float>(x));
      if (c.rank() == 5) {
        const auto deadline = Clock::now() + std::chrono::seconds(10);
        while (finished_first.load() < n - 1 && Clock::now() < deadline) std::this_thread::yield();
        ASSERT_EQ(finished_first.load(), n - 1) << "not every other rank finished the first call";
        std::this_thread::sleep_for(milliseconds(50));  // the others are blocked by now
        thrown_at = now_ns();
        throw std::runtime_error("boom: rank 5's own error");
      }
      finished_first.fetch_add(1);
      try {
        c.all_reduce(std::span<float>(x));
      } catch (const AbortedError&) {
        woke[c.rank()] = now_ns();
        throw;
      }
    });
    FAIL() << "expected RankFailure";
  } catch (const RankFailure& f) {
    EXPECT_EQ(f.rank(), 5);
    EXPECT_TRUE(has(f.what(), "boom: rank 5's own error")) << f.what();
    EXPECT_THROW(std::rethrow_exception(f.cause()), std::runtime_error);
  }
  for (int r = 0; r < n; ++r) {
    if (r == 5) continue;
    ASSERT_NE(woke[r].load(), 0) << "rank " << r;
    const double ms = (woke[r] - thrown_at) / 1e6;
    EXPECT_LT(ms, 100.0) << "rank " << r << " woke " << ms << " ms after the throw";
  }
}

}  // namespace
}  // namespace dtsim
