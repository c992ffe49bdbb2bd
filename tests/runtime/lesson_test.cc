// Every assertion of the lesson's Step 1 (collective primitives) and Step 2 (ring
// all-reduce and its traffic), run against the threaded collectives instead of the
// list-of-tensors reference. Traffic figures come from World::counters, not formulas.
#include <gtest/gtest.h>

#include <cmath>
#include <utility>
#include <vector>

#include "runtime/split.h"
#include "runtime_test_util.h"

namespace dtsim::testing {
namespace {

constexpr int kN = 4;

// The lesson's xs: N random tensors of `numel` (torch.randn stands in as a normal draw).
Ranks<float> randn(int n, size_t numel, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d;
  Ranks<float> xs(n, std::vector<float>(numel));
  for (auto& x : xs) {
    for (auto& v : x) v = d(g);
  }
  return xs;
}

Ranks<float> threaded_reduce_scatter(World& w, const Ranks<float>& xs) {
  const int n = w.size();
  return run_out_of_place(
      w, xs, [&](int r) { return split_size(xs[0].size(), n, r); },
      [](Communicator& c, const std::vector<float>& in, std::vector<float>& out) {
        c.reduce_scatter(std::span<const float>(in), std::span<float>(out));
      });
}

Ranks<float> threaded_all_gather(World& w, const Ranks<float>& chunks) {
  size_t total = 0;
  for (const auto& c : chunks) total += c.size();
  return run_out_of_place(
      w, chunks, [&](int) { return total; },
      [](Communicator& c, const std::vector<float>& in, std::vector<float>& out) {
        c.all_gather(std::span<const float>(in), std::span<float>(out));
      });
}

Ranks<float> threaded_all_reduce(World& w, const Ranks<float>& xs, Algo algo = Algo::kAuto) {
  return run_in_place(w, xs, [&](Communicator& c, std::vector<float>& x) {
    c.all_reduce(std::span<float>(x), ReduceOp::kSum, algo);
  });
}

Ranks<float> threaded_all_to_all(World& w, const Ranks<float>& xs) {
  const int n = w.size();
  return run_out_of_place(
      w, xs, [&](int r) { return n * split_size(xs[0].size(), n, r); },
      [](Communicator& c, const std::vector<float>& in, std::vector<float>& out) {
        c.all_to_all(std::span<const float>(in), std::span<float>(out));
      });
}

TEST(LessonStep1, BroadcastGivesEveryRankTheSourceCopy) {
  World w(kN);
  const Ranks<float> xs = randn(kN, 8, 0);
  const Ranks<float> got = run_in_place(
      w, xs, [](Communicator& c, std::vector<float>& x) { c.broadcast(std::span<float>(x), 2); });
  for (const auto& b : got) EXPECT_TRUE(same_bits(b, xs[2]));
}

TEST(LessonStep1, ReduceGivesOnlyTheDestinationTheSum) {
  World w(kN);
  const Ranks<float> xs = randn(kN, 8, 1);
  const std::vector<float> total = ref_reduction(xs, ReduceOp::kSum);
  const Ranks<float> got = run_in_place(
      w, xs, [](Communicator& c, std::vector<float>& x) { c.reduce(std::span<float>(x), 0); });
  EXPECT_TRUE(near_equal(Ranks<float>{got[0]}, Ranks<float>{total}, 1e-5));
  EXPECT_TRUE(same_bits(got[1], xs[1]));
  EXPECT_FALSE(same_bits(got[0], xs[0]));
}

TEST(LessonStep1, AllReduceGivesEveryRankTheSum) {
  World w(kN);
  const Ranks<float> xs = randn(kN, 8, 2);
  EXPECT_TRUE(near_equal(threaded_all_reduce(w, xs), ref_all_reduce(xs, ReduceOp::kSum), 1e-5));
}

TEST(LessonStep1, ReduceScatterGivesRankRChunkROfTheSum) {
  World w(kN);
  const Ranks<float> xs = randn(kN, 8, 3);
  const Ranks<float> rs = threaded_reduce_scatter(w, xs);
  for (const auto& c : rs) EXPECT_EQ(c.size(), 2u);
  EXPECT_TRUE(near_equal(rs, ref_reduce_scatter(xs, ReduceOp::kSum), 1e-5));
}

TEST(LessonStep1, AllGatherOfReduceScatterIsAllReduce) {
  World w(kN);
  const Ranks<float> xs = randn(kN, 8, 4);
  const Ranks<float> ag = threaded_all_gather(w, threaded_reduce_scatter(w, xs));
  EXPECT_TRUE(near_equal(ag, threaded_all_reduce(w, xs), 1e-5));
  // With integer values both sides are exact, so the identity holds bit for bit.
  const Ranks<float> ints = int_data<float>(kN, 8, 5);
  EXPECT_TRUE(bitwise_equal(threaded_all_gather(w, threaded_reduce_scatter(w, ints)),
                            threaded_all_reduce(w, ints)));
}

TEST(LessonStep1, UnevenTenOverFourSplitsThreeThreeTwoTwo) {
  World w(kN);
  const Ranks<float> ys = randn(kN, 10, 6);
  const Ranks<float> rs = threaded_reduce_scatter(w, ys);
  std::vector<size_t> sizes;
  for (const auto& c : rs) sizes.push_back(c.size());
  EXPECT_EQ(sizes, (std::vector<size_t>{3, 3, 2, 2}));
  EXPECT_TRUE(near_equal(rs, ref_reduce_scatter(ys, ReduceOp::kSum), 1e-5));
  EXPECT_TRUE(near_equal(threaded_all_gather(w, rs), threaded_all_reduce(w, ys), 1e-5));
  const Ranks<float> ints = int_data<float>(kN, 10, 7);
  EXPECT_TRUE(bitwise_equal(threaded_all_gather(w, threaded_reduce_scatter(w, ints)),
                            ref_all_reduce(ints, ReduceOp::kSum)));
}

TEST(LessonStep1, AllToAllIsATransposeOfTheRankChunkGrid) {
  World w(kN);
  const Ranks<float> xs = randn(kN, 8, 8);
  const Ranks<float> a2a = threaded_all_to_all(w, xs);
  // grid[src rank][chunk][elem] transposed: a2a[j] chunk i == xs[i] chunk j.
  for (int j = 0; j < kN; ++j) {
    for (int i = 0; i < kN; ++i) {
      EXPECT_TRUE(same_bits(chunk_of(a2a[j], kN, i), chunk_of(xs[i], kN, j)))
          << "rank " << j << " chunk " << i;
    }
  }
  EXPECT_TRUE(bitwise_equal(threaded_all_to_all(w, a2a), xs));  // an involution
}

TEST(LessonStep2, RingTrafficIsTwoNMinusOneTimesNumel) {
  const std::vector<std::pair<int, size_t>> cases = {{4, 8}, {8, 64}, {2, 6}, {4, 10}, {3, 1}};
  for (const auto& [n, numel] : cases) {
    SCOPED_TRACE(describe_case(n, numel, "ring all_reduce"));
    const Ranks<float> xs = randn(n, numel, 10 + n);
    World w(n);
    const Ranks<float> out = threaded_all_reduce(w, xs, Algo::kRing);
    EXPECT_TRUE(near_equal(out, ref_all_reduce(xs, ReduceOp::kSum), 1e-5));
    uint64_t total = 0;
    for (int r = 0; r < n; ++r) {
      const OpCounters& c = w.counters(r)[OpKind::kAllReduce];
      total += c.bytes_sent / sizeof(float);
      EXPECT_EQ(c.steps, 2u * (n - 1));
      if (numel % n == 0) {
        EXPECT_EQ(c.bytes_sent / sizeof(float), 2 * (n - 1) * numel / n);
      }
    }
    EXPECT_EQ(total, 2 * (n - 1) * numel);
  }
}

TEST(LessonStep2, TwoRanksWithGradientsTwoAndSixAverageToFour) {
  World w(2);
  const Ranks<float> got =
      run_in_place(w, Ranks<float>{{2.0f}, {6.0f}}, [](Communicator& c, std::vector<float>& g) {
        c.all_reduce(std::span<float>(g), ReduceOp::kAvg);
      });
  EXPECT_EQ(got, (Ranks<float>{{4.0f}, {4.0f}}));
}

TEST(LessonStep2, EightGpuRingSendsTwentyFourPointFiveGigabytesOfSevenBGradients) {
  // Measure the per-rank fraction on N = 8 with bf16 gradients, then scale to 7e9 bf16
  // parameters (14e9 bytes).
  constexpr int n = 8;
  constexpr size_t numel = 8 * 1024;
  World w(n);
  w.run([&](Communicator& c) {
    std::vector<BFloat16> g(numel, BFloat16(1.0f));
    c.all_reduce(std::span<BFloat16>(g), ReduceOp::kSum, Algo::kRing);
  });
  const double grad_bytes = 2 * 7e9;
  for (int r = 0; r < n; ++r) {
    const double fraction = static_cast<double>(w.counters(r)[OpKind::kAllReduce].bytes_sent) /
                            static_cast<double>(numel * sizeof(BFloat16));
    EXPECT_LT(std::fabs(fraction * grad_bytes / 1e9 - 24.5), 1e-9) << "rank " << r;
  }
}

// Step 2's schedule: in reduce-scatter step t rank r sends chunk (r - t) mod N to r + 1;
// in all-gather step t it sends chunk (r + 1 - t) mod N. Read from the lockstep trace.
TEST(LessonStep2, RingFollowsTheLessonSchedule) {
  for (int n : {2, 3, 4, 8}) {
    SCOPED_TRACE(describe_case(n, 2 * n, "ring trace"));
    WorldOptions o;
    o.trace = true;
    World w(n, o);
    threaded_all_reduce(w, randn(n, 2 * n, 20), Algo::kRing);
    for (int r = 0; r < n; ++r) {
      const auto sends = w.trace(r).sends();
      ASSERT_EQ(sends.size(), 2u * (n - 1));
      for (int k = 0; k < 2 * (n - 1); ++k) {
        const TraceEvent& s = sends[k];
        const int t = k < n - 1 ? k : k - (n - 1);
        const int want = k < n - 1 ? ((r - t) % n + n) % n : ((r + 1 - t) % n + n) % n;
        EXPECT_EQ(s.src, r);
        EXPECT_EQ(s.dst, (r + 1) % n);
        EXPECT_EQ(s.chunk, want) << "rank " << r << " send " << k;
        EXPECT_EQ(s.count, 2u);
      }
    }
  }
}

}  // namespace
}  // namespace dtsim::testing
