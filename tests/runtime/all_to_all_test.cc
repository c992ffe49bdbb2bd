// all_to_all (equal tensor_split chunks) and all_to_all_single (explicit, random split
// sizes including zeros) against the reference: the transpose of the [rank, chunk] grid.
#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <vector>

#include "runtime_test_util.h"

namespace dtsim::testing {
namespace {

// Values that name their origin: rank i's element k is i * 1e6 + k.
Ranks<int64_t> labelled(int n, size_t len) {
  Ranks<int64_t> xs(n, std::vector<int64_t>(len));
  for (int i = 0; i < n; ++i) {
    for (size_t k = 0; k < len; ++k) xs[i][k] = int64_t{i} * 1000000 + static_cast<int64_t>(k);
  }
  return xs;
}

template <class T>
Ranks<T> threaded_all_to_all(World& w, const Ranks<T>& xs) {
  const int n = w.size();
  const size_t len = xs[0].size();
  return run_out_of_place(
      w, xs, [&](int r) { return n * split_size(len, n, r); },
      [](Communicator& c, const std::vector<T>& in, std::vector<T>& out) {
        c.all_to_all(std::span<const T>(in), std::span<T>(out));
      });
}

// counts[i][j]: elements rank i sends to rank j, uniform in [0, max], about a third zero.
std::vector<std::vector<size_t>> random_counts(int n, size_t max, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_int_distribution<size_t> d(0, max);
  std::vector<std::vector<size_t>> c(n, std::vector<size_t>(n));
  for (auto& row : c) {
    for (auto& x : row) x = g() % 3 == 0 ? 0 : d(g);
  }
  return c;
}

// Inputs for all_to_all_single: rank i holds its labelled values, sum_j counts[i][j] of them.
Ranks<int64_t> labelled_for(const std::vector<std::vector<size_t>>& counts) {
  const int n = static_cast<int>(counts.size());
  Ranks<int64_t> xs(n);
  for (int i = 0; i < n; ++i) {
    const size_t len = std::accumulate(counts[i].begin(), counts[i].end(), size_t{0});
    xs[i] = labelled(n, len)[i];
  }
  return xs;
}

Ranks<int64_t> threaded_all_to_all_single(World& w, const Ranks<int64_t>& xs,
                                          const std::vector<std::vector<size_t>>& counts) {
  const int n = w.size();
  Ranks<int64_t> out(n);
  for (int j = 0; j < n; ++j) {
    size_t total = 0;
    for (int i = 0; i < n; ++i) total += counts[i][j];
    out[j].assign(total, -1);
  }
  w.run([&](Communicator& c) {
    const int r = c.rank();
    std::vector<size_t> recv(n);
    for (int i = 0; i < n; ++i) recv[i] = counts[i][r];
    c.all_to_all_single(std::span<const int64_t>(xs[r]), std::span<const size_t>(counts[r]),
                        std::span<int64_t>(out[r]), std::span<const size_t>(recv));
  });
  share_results(w, out);
  return out;
}

TEST(AllToAllTest, EqualSplitsAreATransposeAndAnInvolution) {
  for (int n : sweep_sizes()) {
    TestWorld w(n);
    for (size_t len : sweep_lengths(n)) {
      SCOPED_TRACE(describe_case(n, len, "all_to_all"));
      const Ranks<int64_t> xs = labelled(n, len);
      const Ranks<int64_t> a2a = threaded_all_to_all(w, xs);
      EXPECT_TRUE(bitwise_equal(a2a, ref_all_to_all(xs)));
      // Applying it twice gives back the input only when every chunk has the same size.
      if (len % n == 0) {
        EXPECT_TRUE(bitwise_equal(threaded_all_to_all(w, a2a), xs));
      }
      const Ranks<BFloat16> bs = int_data<BFloat16>(n, len, n + len);
      EXPECT_TRUE(bitwise_equal(threaded_all_to_all(w, bs), ref_all_to_all(bs)));
    }
  }
}

TEST(AllToAllTest, SingleWithRandomSplitSizesIncludingZeros) {
  for (int n : sweep_sizes()) {
    TestWorld w(n);
    for (size_t max : {size_t{0}, size_t{1}, size_t{7}, size_t{1000}}) {
      for (uint64_t seed = 0; seed < 3; ++seed) {
        SCOPED_TRACE(describe_case(n, max, "all_to_all_single max split"));
        const auto counts = random_counts(n, max, 1000 * n + 10 * max + seed);
        const Ranks<int64_t> xs = labelled_for(counts);
        EXPECT_TRUE(bitwise_equal(threaded_all_to_all_single(w, xs, counts),
                                  ref_all_to_all_single(xs, counts)));
      }
    }
  }
}

TEST(AllToAllTest, SingleMovesALargeOddBlock) {
  // One large block, every other split zero except a few: exercises big messages.
  for (int n : sizes_or({2, 5, 16})) {
    TestWorld w(n);
    std::vector<std::vector<size_t>> counts(n, std::vector<size_t>(n, 0));
    for (int i = 0; i < n; ++i) counts[i][(i + 1) % n] = kLargeOdd / n + i;
    counts[0][0] = 3;
    const Ranks<int64_t> xs = labelled_for(counts);
    EXPECT_TRUE(
        bitwise_equal(threaded_all_to_all_single(w, xs, counts), ref_all_to_all_single(xs, counts)))
        << "N=" << n;
  }
}

TEST(AllToAllTest, SixtyFourRanks) {
  DTSIM_THREADS_ONLY();
  constexpr int n = 64;
  World w(n);
  const Ranks<int64_t> xs = labelled(n, 2 * n);
  const Ranks<int64_t> a2a = threaded_all_to_all(w, xs);
  EXPECT_TRUE(bitwise_equal(a2a, ref_all_to_all(xs)));
  EXPECT_TRUE(bitwise_equal(threaded_all_to_all(w, a2a), xs));
  const auto counts = random_counts(n, 5, 64);
  const Ranks<int64_t> ys = labelled_for(counts);
  EXPECT_TRUE(
      bitwise_equal(threaded_all_to_all_single(w, ys, counts), ref_all_to_all_single(ys, counts)));
  w.run([](Communicator& c) { c.barrier(); });
}

}  // namespace
}  // namespace dtsim::testing
