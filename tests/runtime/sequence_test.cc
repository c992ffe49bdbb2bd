// Back-to-back collectives never mix: every rank runs the same seeded random program of
// hundreds of collectives of different kinds, sizes, roots and algorithms with no
// barrier between them, and checks each result on the spot. Plus the memory target: 64
// idle ranks cost the runtime under 64 MiB.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "runtime_test_util.h"

namespace dtsim::testing {
namespace {

// One step of the shared program; every rank draws the same values from the same seed.
void random_step(Communicator& c, std::mt19937_64& g, int i) {
  const int n = c.size();
  const int r = c.rank();
  const size_t len = g() % 3 == 0 ? g() % 4 : g() % 3000;
  const int kind = static_cast<int>(g() % 6);
  const int root = static_cast<int>(g() % n);
  const int64_t tag = int64_t{i} << 20;
  switch (kind) {
    case 0: {
      const Algo algos[] = {Algo::kRing, Algo::kRecursiveDoubling, Algo::kTree, Algo::kDirect,
                            Algo::kDeterministic};
      std::vector<int64_t> v(len, tag + r);
      c.all_reduce(std::span<int64_t>(v), ReduceOp::kSum, algos[g() % 5]);
      for (int64_t x : v) ASSERT_EQ(x, n * tag + n * (n - 1) / 2) << "step " << i;
      break;
    }
    case 1: {
      std::vector<int64_t> v(len, r == root ? tag + 7 : -1);
      c.broadcast(std::span<int64_t>(v), root, g() % 2 ? Algo::kTree : Algo::kDirect);
      for (int64_t x : v) ASSERT_EQ(x, tag + 7) << "step " << i;
      break;
    }
    case 2: {
      std::vector<int64_t> in(len, tag + r), out(split_size(len, n, r));
      c.reduce_scatter(std::span<const int64_t>(in), std::span<int64_t>(out), ReduceOp::kMax,
                       g() % 2 ? Algo::kRing : Algo::kDeterministic);
      for (int64_t x : out) ASSERT_EQ(x, tag + n - 1) << "step " << i;
      break;
    }
    case 3: {
      std::vector<int64_t> in(split_size(len, n, r), tag + r), out(len);
      c.all_gather(std::span<const int64_t>(in), std::span<int64_t>(out));
      for (int p = 0; p < n; ++p) {
        for (size_t k = 0; k < split_size(len, n, p); ++k) {
          ASSERT_EQ(out[split_offset(len, n, p) + k], tag + p) << "step " << i;
        }
      }
      break;
    }
    case 4: {
      std::vector<int64_t> in(len, tag + r), out(n * split_size(len, n, r));
      c.all_to_all(std::span<const int64_t>(in), std::span<int64_t>(out));
      const size_t chunk = split_size(len, n, r);
      for (int p = 0; p < n; ++p) {
        for (size_t k = 0; k < chunk; ++k) ASSERT_EQ(out[p * chunk + k], tag + p) << "step " << i;
      }
      break;
    }
    default: {
      std::vector<int64_t> v(len, tag + r);
      c.reduce(std::span<int64_t>(v), root, ReduceOp::kMin);
      for (int64_t x : v) ASSERT_EQ(x, r == root ? tag : tag + r) << "step " << i;
      break;
    }
  }
}

TEST(SequenceTest, HundredsOfBackToBackCollectivesNeverMix) {
  const int steps = kSmall ? 150 : 400;
  for (int n : sizes_or({2, 3, 4, 8, 16})) {
    TestWorld w(n);
    w.run([&](Communicator& c) {
      std::mt19937_64 g(1234 + n);
      for (int i = 0; i < steps; ++i) {
        random_step(c, g, i);
        if (::testing::Test::HasFatalFailure()) return;
      }
    });
    for (int r = 0; r < n; ++r)
      EXPECT_EQ(w.counters(r).total().calls, static_cast<uint64_t>(steps));
  }
}

TEST(SequenceTest, SkewedRanksRunAheadWithoutMixing) {
  // Rank 0 sleeps now and then, so the others run several collectives ahead and their
  // messages for later sequence numbers queue up before rank 0 asks for earlier ones.
  constexpr int n = 4;
  TestWorld w(n);
  w.run([&](Communicator& c) {
    for (int i = 0; i < 100; ++i) {
      if (c.rank() == 0 && i % 10 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      std::vector<int32_t> v(1 + i % 7, i);
      c.all_reduce(std::span<int32_t>(v), ReduceOp::kSum, Algo::kDirect);
      for (int32_t x : v) ASSERT_EQ(x, n * i);
    }
  });
}

// Resident set size of this process, from /proc/self/status.
size_t vm_rss_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

TEST(MemoryTest, SixtyFourIdleRanksCostUnderSixtyFourMiB) {
  const size_t before = vm_rss_bytes();
  ASSERT_GT(before, 0u);
  TestWorld w(64);
  w.run([](Communicator& c) { c.barrier(); });
  const size_t growth = vm_rss_bytes() - std::min(before, vm_rss_bytes());
  // Sanitizers add shadow memory for every byte the runtime touches; the target is for
  // the plain build.
  const size_t limit = size_t{64} << 20;
  const size_t scaled = kSmall ? 8 * limit : limit;
  EXPECT_LT(growth, scaled) << "64 idle ranks grew RSS by " << (growth >> 20) << " MiB";
  RecordProperty("rss_growth_kib", std::to_string(growth >> 10));
}

}  // namespace
}  // namespace dtsim::testing
