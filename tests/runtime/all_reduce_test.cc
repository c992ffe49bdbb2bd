// all_reduce, every algorithm, against the single-threaded reference: N in 1..8 and 16
// (and once at 64) on threads, the job's size over MPI and hybrid (runtime_test_util.h), lengths
// {0, 1, 7, N - 1, 1000, large odd}, every dtype and reduce op. Integer-valued data makes every
// summation order exact, so equality is bitwise; random floats are compared with a tolerance for
// the reordering algorithms, and every algorithm must leave identical bits on every rank.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "runtime_test_util.h"

namespace dtsim::testing {
namespace {

const std::vector<Algo> kAlgos = algorithms_to_test(OpKind::kAllReduce);
const std::vector<ReduceOp> kOps = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin};

std::string label(Algo a, ReduceOp op, DType t) {
  return std::string(to_string(a)) + "/" + to_string(op) + "/" + to_string(t);
}

// Integer values that keep sums exact in T (bf16: |sum| <= 16 * 8 = 128).
template <class T>
int64_t bound_for() {
  if constexpr (std::is_same_v<T, int64_t>) return int64_t{1} << 40;
  if constexpr (std::is_same_v<T, int32_t>) return int64_t{1} << 20;
  if constexpr (std::is_same_v<T, BFloat16>) return 8;
  return 1 << 16;
}

template <class T>
Ranks<T> threaded_all_reduce(World& w, const Ranks<T>& xs, ReduceOp op, Algo algo) {
  return run_in_place(
      w, xs, [&](Communicator& c, std::vector<T>& x) { c.all_reduce(std::span<T>(x), op, algo); });
}

template <class T>
void check_exact(World& w, size_t len, Algo algo, ReduceOp op, uint64_t seed) {
  const Ranks<T> xs = int_data<T>(w.size(), len, seed, bound_for<T>());
  EXPECT_TRUE(bitwise_equal(threaded_all_reduce(w, xs, op, algo), ref_all_reduce(xs, op)))
      << label(algo, op, dtype_of<T>());
}

TEST(AllReduceTest, EveryAlgorithmAndOpMatchesReferenceInt64) {
  for (int n : sweep_sizes()) {
    TestWorld w(n);
    for (size_t len : sweep_lengths(n)) {
      SCOPED_TRACE(describe_case(n, len, "all_reduce int64"));
      for (Algo a : kAlgos) {
        for (ReduceOp op : kOps) check_exact<int64_t>(w, len, a, op, 100 * n + len);
      }
    }
  }
}

TEST(AllReduceTest, EveryAlgorithmMatchesReferenceForEveryDtype) {
  for (int n : sweep_sizes()) {
    TestWorld w(n);
    for (size_t len : sweep_lengths(n)) {
      SCOPED_TRACE(describe_case(n, len, "all_reduce dtypes"));
      for (Algo a : kAlgos) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
          if (len == kLargeOdd && op != ReduceOp::kSum) continue;  // keep the runtime sane
          check_exact<float>(w, len, a, op, 7 * n + len);
          check_exact<double>(w, len, a, op, 11 * n + len);
          check_exact<int32_t>(w, len, a, op, 13 * n + len);
          if (runs_bf16(a)) check_exact<BFloat16>(w, len, a, op, 17 * n + len);
        }
      }
    }
  }
}

TEST(AllReduceTest, RandomFloatsCloseToReferenceAndIdenticalOnEveryRank) {
  for (int n : sweep_sizes()) {
    TestWorld w(n);
    for (size_t len : sweep_lengths(n)) {
      SCOPED_TRACE(describe_case(n, len, "all_reduce random floats"));
      const Ranks<float> xs = float_data<float>(n, len, 31 * n + len, 0);
      const Ranks<float> want = ref_all_reduce(xs, ReduceOp::kSum);
      for (Algo a : kAlgos) {
        const Ranks<float> got = threaded_all_reduce(w, xs, ReduceOp::kSum, a);
        EXPECT_TRUE(near_equal(got, want, 1e-5)) << to_string(a);
        EXPECT_TRUE(ranks_agree(got)) << to_string(a);
      }
      // Widely spread magnitudes: sums depend on the order, yet every rank must agree.
      const Ranks<float> spread = float_data<float>(n, len, 37 * n + len);
      for (Algo a : kAlgos) {
        EXPECT_TRUE(ranks_agree(threaded_all_reduce(w, spread, ReduceOp::kSum, a))) << to_string(a);
        EXPECT_TRUE(ranks_agree(threaded_all_reduce(w, spread, ReduceOp::kAvg, a))) << to_string(a);
      }
    }
  }
}

TEST(AllReduceTest, SumOfRanksIsNTimesNMinusOneOverTwo) {
  // The gloo check: every rank contributes its rank; the sum is N(N-1)/2 everywhere.
  for (int n : sweep_sizes()) {
    TestWorld w(n);
    for (Algo a : kAlgos) {
      w.run([&](Communicator& c) {
        std::vector<int32_t> v(5, c.rank());
        c.all_reduce(std::span<int32_t>(v), ReduceOp::kSum, a);
        for (int32_t x : v) EXPECT_EQ(x, n * (n - 1) / 2) << to_string(a) << " N=" << n;
      });
    }
  }
}

// torch.maximum / torch.minimum semantics on the values where a naive std::max is not
// commutative: NaN propagates whatever its position, and max(-0, +0) is +0 (min: -0).
// Every algorithm must give every rank the same bits (recursive doubling computes a op b
// on one partner and b op a on the other).
TEST(AllReduceTest, MaxAndMinPropagateNanAndOrderSignedZerosOnEveryRank) {
  for (int n : sizes_or({2, 3, 4, 8})) {
    TestWorld w(n);
    // Element k: rank r holds a NaN, +0, -0 or a small value, by a pattern that puts the
    // special value on different ranks for different k.
    Ranks<double> xs(n, std::vector<double>(64));
    for (int r = 0; r < n; ++r) {
      for (int k = 0; k < 64; ++k) {
        const int which = (k + r * (k / 8 + 1)) % 5;
        xs[r][k] = which == 0   ? (k % 3 == 0 ? std::nan("") : 0.0)
                   : which == 1 ? -0.0
                   : which == 2 ? 0.0
                                : -1.0 * ((k % 4) == 0);
      }
    }
    for (bool is_max : {true, false}) {
      std::vector<double> want = xs[0];
      for (int r = 1; r < n; ++r) {
        for (int k = 0; k < 64; ++k) want[k] = extreme(want[k], xs[r][k], is_max);
      }
      for (Algo a : kAlgos) {
        // `mpi` too (issue 37): MPI's own MPI_MAX / MPI_MIN kept neither rule (over MPI it
        // dropped the NaN and returned -0 for max(-0, +0)); it now runs dtsim's kernels.
        const Ranks<double> got =
            threaded_all_reduce(w, xs, is_max ? ReduceOp::kMax : ReduceOp::kMin, a);
        EXPECT_TRUE(ranks_agree(got)) << to_string(a) << (is_max ? " max" : " min") << " N=" << n;
        for (int k = 0; k < 64; ++k) {
          EXPECT_EQ(std::isnan(got[0][k]), std::isnan(want[k]))
              << to_string(a) << " element " << k << " N=" << n;
          if (!std::isnan(want[k])) {
            EXPECT_EQ(std::signbit(got[0][k]), std::signbit(want[k]))
                << to_string(a) << (is_max ? " max" : " min") << " element " << k << " N=" << n;
          }
        }
      }
    }
  }
}

TEST(AllReduceTest, SixtyFourRanksEveryAlgorithm) {
  DTSIM_THREADS_ONLY();
  constexpr int n = 64;
  World w(n);
  for (size_t len : {size_t{0}, size_t{1}, size_t{63}, size_t{1000}}) {
    SCOPED_TRACE(describe_case(n, len, "all_reduce"));
    for (Algo a : kAlgos) {
      check_exact<int64_t>(w, len, a, ReduceOp::kSum, len + 1);
      check_exact<float>(w, len, a, ReduceOp::kMax, len + 2);
    }
  }
}

}  // namespace
}  // namespace dtsim::testing
