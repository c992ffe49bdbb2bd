// World behaviour around failures: deadlines that expire fail fast and say where, an
// exception on one rank releases every other rank within milliseconds, World::run rethrows
// it as RankFailure, the World runs again afterwards, and mismatched collectives raise an
// error instead of hanging.
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "runtime_test_util.h"

namespace dtsim::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

WorldOptions with_timeout(milliseconds t) {
  WorldOptions o;
  o.timeout = t;
  return o;
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Runs fn and returns the RankFailure it must throw.
template <class Fn>
RankFailure expect_failure(World& w, Fn fn) {
  try {
    w.run(fn);
  } catch (const RankFailure& f) {
    return f;
  }
  ADD_FAILURE() << "World::run did not throw";
  return RankFailure(-1, nullptr, "");
}

// The exception type of a RankFailure's cause, as the name of the runtime error class.
std::string cause_kind(const RankFailure& f) {
  try {
    if (f.cause()) std::rethrow_exception(f.cause());
  } catch (const TimeoutError&) {
    return "TimeoutError";
  } catch (const MismatchError&) {
    return "MismatchError";
  } catch (const AbortedError&) {
    return "AbortedError";
  } catch (const UsageError&) {
    return "UsageError";
  } catch (const std::logic_error&) {
    return "logic_error";
  } catch (...) {
    return "other";
  }
  return "none";
}

// A healthy all_reduce, to show that the World still works.
void expect_world_works(World& w) {
  const int n = w.size();
  w.run([&](Communicator& c) {
    std::vector<int64_t> v(100, c.rank() + 1);
    c.all_reduce(std::span<int64_t>(v));
    for (int64_t x : v) ASSERT_EQ(x, int64_t{n} * (n + 1) / 2);
    c.barrier();
  });
}

TEST(WorldTest, ExpiredDeadlineFailsFastNamingRankPeerCollectiveAndSeq) {
  // Rank 1 is stuck (busy outside the runtime) while rank 0 waits for it in seq 3.
  // Rank 1 comes back only after rank 0 has failed (or after 5 s), so rank 0 can only have
  // been released by its own deadline, however slowly a loaded machine runs the threads.
  World w(2, with_timeout(milliseconds(200)));
  double waited = -1;
  std::atomic<bool> rank0_failed{false};
  const auto t0 = Clock::now();
  const RankFailure f = expect_failure(w, [&](Communicator& c) {
    std::vector<float> v(8, 1.0f);
    for (int i = 0; i < 3; ++i) c.all_reduce(std::span<float>(v));  // seq 0, 1, 2
    if (c.rank() == 1) {
      const auto until = Clock::now() + milliseconds(5000);
      while (!rank0_failed.load() && Clock::now() < until) {
        std::this_thread::sleep_for(milliseconds(5));
      }
    }
    const auto t1 = Clock::now();
    try {
      c.all_reduce(std::span<float>(v));
    } catch (...) {
      if (c.rank() == 0) {
        waited = seconds_since(t1);
        rank0_failed = true;
      }
      throw;
    }
  });
  EXPECT_LT(seconds_since(t0), 3.0);
  EXPECT_GE(waited, 0.15);  // the deadline, give or take the watchdog's tick
  EXPECT_LT(waited, 2.5);   // its deadline (0.2 s), not rank 1's 5 s
  EXPECT_EQ(f.rank(), 0);
  EXPECT_EQ(cause_kind(f), "TimeoutError");
  const std::string what = f.what();
  EXPECT_NE(what.find("rank 0 timed out"), std::string::npos) << what;
  EXPECT_NE(what.find("waiting for rank 1"), std::string::npos) << what;
  EXPECT_NE(what.find("all_reduce"), std::string::npos) << what;
  EXPECT_NE(what.find("seq 3"), std::string::npos) << what;
  expect_world_works(w);
}

TEST(WorldTest, ExpiredDeadlineInRecvNamesThePeer) {
  World w(3, with_timeout(milliseconds(150)));
  const auto t0 = Clock::now();
  const RankFailure f = expect_failure(w, [](Communicator& c) {
    if (c.rank() == 1) std::this_thread::sleep_for(milliseconds(400));  // never sends
    if (c.rank() != 2) return;
    std::vector<int32_t> v(4);
    c.recv(std::span<int32_t>(v), 1, 7);
  });
  EXPECT_LT(seconds_since(t0), 1.5);
  EXPECT_EQ(f.rank(), 2);
  EXPECT_EQ(cause_kind(f), "TimeoutError");
  const std::string what = f.what();
  EXPECT_NE(what.find("rank 2 timed out"), std::string::npos) << what;
  EXPECT_NE(what.find("waiting for rank 1"), std::string::npos) << what;
  EXPECT_NE(what.find("recv"), std::string::npos) << what;
  expect_world_works(w);
}

TEST(WorldTest, SkippedCollectiveFailsLongBeforeTheDeadline) {
  // Rank 1 returns without calling seq 1: with a 60 s deadline the waiting ranks must
  // still fail quickly (the runtime sees that rank 1 returned), naming rank 1.
  World w(4);
  const auto t0 = Clock::now();
  const RankFailure f = expect_failure(w, [](Communicator& c) {
    std::vector<float> v(8, 1.0f);
    c.all_reduce(std::span<float>(v));
    if (c.rank() == 1) return;
    c.all_reduce(std::span<float>(v));
  });
  EXPECT_LT(seconds_since(t0), 2.0);
  const std::string kind = cause_kind(f);
  EXPECT_TRUE(kind == "MismatchError" || kind == "TimeoutError") << kind << ": " << f.what();
  EXPECT_NE(std::string(f.what()).find("rank 1"), std::string::npos) << f.what();
  EXPECT_NE(std::string(f.what()).find("seq 1"), std::string::npos) << f.what();
  expect_world_works(w);
}

TEST(WorldTest, ExceptionOnOneRankReleasesEveryOtherRankQuickly) {
  // Mode 0: the others block in a ring all_reduce the thrower never joins. Mode 1: they
  // block in a barrier (even ranks) or in a recv from the thrower (odd ranks).
  for (int n : {2, 8, 16}) {
    for (int mode : {0, 1}) {
      SCOPED_TRACE(describe_case(n, mode, "exception mode"));
      World w(n);  // default 60 s deadline: only the abort can release the others quickly
      const int thrower = n / 2;
      const auto t0 = Clock::now();
      const RankFailure f = expect_failure(w, [&](Communicator& c) {
        std::vector<float> v(1000, 1.0f);
        c.all_reduce(std::span<float>(v));
        if (c.rank() == thrower) {
          std::this_thread::sleep_for(milliseconds(20));
          throw std::logic_error("boom on purpose");
        }
        if (mode == 0) {
          c.all_reduce(std::span<float>(v), ReduceOp::kSum, Algo::kRing);
        } else if (c.rank() % 2 == 0) {
          c.barrier();
        } else {
          c.recv(std::span<float>(v), thrower);
        }
      });
      EXPECT_LT(seconds_since(t0), 1.0);
      EXPECT_EQ(f.rank(), thrower);
      EXPECT_EQ(cause_kind(f), "logic_error");
      EXPECT_NE(std::string(f.what()).find("boom on purpose"), std::string::npos) << f.what();
      expect_world_works(w);
    }
  }
}

TEST(WorldTest, NonStandardExceptionIsStillReported) {
  World w(4);
  const RankFailure f = expect_failure(w, [](Communicator& c) {
    if (c.rank() == 3) throw 42;
    c.barrier();
  });
  EXPECT_EQ(f.rank(), 3);
  EXPECT_EQ(cause_kind(f), "other");
  expect_world_works(w);
}

TEST(WorldTest, RunsManyTimesAndCountersDescribeTheLastRun) {
  World w(4);
  for (int i = 0; i < 20; ++i) expect_world_works(w);
  w.run([](Communicator& c) { c.barrier(); });
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(w.counters(r)[OpKind::kAllReduce].calls, 0u);
    EXPECT_EQ(w.counters(r)[OpKind::kBarrier].calls, 1u);
  }
}

// bind_to_cores pins rank r to the r-th allowed CPU (mod their number), like mpirun's
// --bind-to core; without it a rank may run anywhere the process may.
TEST(WorldTest, BindToCoresPinsEachRankToOneCpu) {
  cpu_set_t allowed;
  ASSERT_EQ(sched_getaffinity(0, sizeof allowed, &allowed), 0);
  const int cpus = CPU_COUNT(&allowed);
  for (bool bind : {false, true}) {
    WorldOptions o;
    o.bind_to_cores = bind;
    const int n = 3;
    World w(n, o);
    std::vector<cpu_set_t> masks(n);
    w.run([&](Communicator& c) {
      pthread_getaffinity_np(pthread_self(), sizeof(cpu_set_t), &masks[c.rank()]);
    });
    for (int r = 0; r < n; ++r) {
      if (!bind) {
        EXPECT_EQ(CPU_COUNT(&masks[r]), cpus) << "rank " << r;
        continue;
      }
      ASSERT_EQ(CPU_COUNT(&masks[r]), 1) << "rank " << r;
      int nth = 0;  // rank r's CPU must be the (r mod cpus)-th allowed one
      for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
        if (!CPU_ISSET(cpu, &allowed)) continue;
        if (nth++ == r % cpus) {
          EXPECT_TRUE(CPU_ISSET(cpu, &masks[r])) << "rank " << r;
        }
      }
    }
  }
}

TEST(WorldTest, WorldSizeOutOfRangeIsAUsageError) {
  EXPECT_THROW(World(0), UsageError);
  EXPECT_THROW(World(-3), UsageError);
  EXPECT_THROW(World(5000), UsageError);
}

// A mismatch must end in an error, quickly, never a hang (deadline 2 s).
void expect_mismatch(int n, const std::function<void(Communicator&)>& fn, const char* what,
                     bool must_be_mismatch) {
  SCOPED_TRACE(what);
  World w(n, with_timeout(milliseconds(2000)));
  const auto t0 = Clock::now();
  const RankFailure f = expect_failure(w, fn);
  EXPECT_LT(seconds_since(t0), 3.0);
  const std::string kind = cause_kind(f);
  if (must_be_mismatch) {
    EXPECT_EQ(kind, "MismatchError") << f.what();
  } else {
    EXPECT_TRUE(kind == "MismatchError" || kind == "TimeoutError") << kind << ": " << f.what();
  }
  expect_world_works(w);
}

TEST(WorldTest, MismatchedCollectivesRaiseInsteadOfHanging) {
  expect_mismatch(
      4,
      [](Communicator& c) {
        std::vector<float> v(8, 1.0f);
        if (c.rank() == 2) {
          c.broadcast(std::span<float>(v), 0);
        } else {
          c.all_reduce(std::span<float>(v));
        }
      },
      "all_reduce vs broadcast", false);
  expect_mismatch(
      4,
      [](Communicator& c) {
        std::vector<float> v(c.rank() == 1 ? 9 : 8, 1.0f);
        c.all_reduce(std::span<float>(v), ReduceOp::kSum, Algo::kRing);
      },
      "all_reduce lengths 8 vs 9", false);
  expect_mismatch(
      2,
      [](Communicator& c) {
        std::vector<double> v(16, 1.0);
        c.all_reduce(std::span<double>(v), c.rank() == 0 ? ReduceOp::kSum : ReduceOp::kMax);
      },
      "all_reduce sum vs max", true);
  expect_mismatch(
      2,
      [](Communicator& c) {
        if (c.rank() == 0) {
          std::vector<float> v(16, 1.0f);
          c.all_reduce(std::span<float>(v));
        } else {
          std::vector<int32_t> v(16, 1);
          c.all_reduce(std::span<int32_t>(v));
        }
      },
      "all_reduce float vs int32", true);
  expect_mismatch(
      4,
      [](Communicator& c) {
        std::vector<float> v(8, 1.0f);
        c.broadcast(std::span<float>(v), c.rank() == 3 ? 1 : 0);
      },
      "broadcast roots 0 vs 1", false);
  expect_mismatch(
      3,
      [](Communicator& c) {
        // Rank 0 sends 2 elements to rank 1, which expects 3.
        const std::vector<size_t> send =
            c.rank() == 0 ? std::vector<size_t>{1, 2, 1} : std::vector<size_t>{1, 1, 1};
        std::vector<size_t> recv = {1, 1, 1};
        if (c.rank() == 1) recv[0] = 3;
        std::vector<float> in(send[0] + send[1] + send[2]), out(recv[0] + recv[1] + recv[2]);
        c.all_to_all_single(std::span<const float>(in), std::span<const size_t>(send),
                            std::span<float>(out), std::span<const size_t>(recv));
      },
      "all_to_all_single split sizes disagree", true);
}

TEST(WorldTest, WrongBufferSizesAreUsageErrors) {
  World w(4, with_timeout(milliseconds(2000)));
  const auto usage = [&](const std::function<void(Communicator&)>& fn, const char* what) {
    SCOPED_TRACE(what);
    const RankFailure f = expect_failure(w, fn);
    EXPECT_EQ(cause_kind(f), "UsageError") << f.what();
  };
  usage(
      [](Communicator& c) {
        std::vector<float> in(10), out(2);  // rank 0 and 1 need 3 elements
        c.reduce_scatter(std::span<const float>(in), std::span<float>(out));
      },
      "reduce_scatter output");
  usage(
      [](Communicator& c) {
        std::vector<float> in(2), out(10);  // rank 0 and 1 must pass 3 elements
        c.all_gather(std::span<const float>(in), std::span<float>(out));
      },
      "all_gather input");
  usage(
      [](Communicator& c) {
        std::vector<float> in(8), out(7);
        c.all_to_all(std::span<const float>(in), std::span<float>(out));
      },
      "all_to_all output");
  usage(
      [](Communicator& c) {
        std::vector<float> in(4), out(4);
        const std::vector<size_t> send = {1, 1, 1, 1}, recv = {1, 1, 1};
        c.all_to_all_single(std::span<const float>(in), std::span<const size_t>(send),
                            std::span<float>(out), std::span<const size_t>(recv));
      },
      "all_to_all_single count list");
  usage(
      [](Communicator& c) {
        std::vector<float> in(4), out(4);
        const std::vector<size_t> send = {2, 1, 1, 1}, recv = {1, 1, 1, 1};
        c.all_to_all_single(std::span<const float>(in), std::span<const size_t>(send),
                            std::span<float>(out), std::span<const size_t>(recv));
      },
      "all_to_all_single counts vs input");
  usage(
      [](Communicator& c) {
        std::vector<float> v(4);
        c.broadcast(std::span<float>(v), 4);
      },
      "broadcast root out of range");
  usage(
      [](Communicator& c) {
        std::vector<std::byte> v(4);
        c.all_reduce(std::span<std::byte>(v));
      },
      "all_reduce of raw bytes");
  usage(
      [](Communicator& c) {
        std::vector<float> v(4);
        c.all_gather(std::span<const float>(v.data(), 1), std::span<float>(v), Algo::kTree);
      },
      "all_gather tree");
  expect_world_works(w);
}

}  // namespace
}  // namespace dtsim::testing
