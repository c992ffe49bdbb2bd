// kDeterministic and kDirect sum every element in rank order 0..N-1: on random floats of
// widely spread magnitudes (where the order of a sum changes its bits) the result must be
// bitwise equal to the sequential sum x0 + x1 + ... + x{N-1}, and to itself run after run.
#include <gtest/gtest.h>

#include <vector>

#include "runtime_test_util.h"

namespace dtsim::testing {
namespace {

// The rows the registry calls deterministic: this file holds them to that claim.
std::vector<Algo> deterministic_algorithms(OpKind op) {
  std::vector<Algo> out;
  for (const AlgoRow* row : algorithms_of(op)) {
    if (row->deterministic && row->needs == kWorldBasic) out.push_back(row->algo);
  }
  return out;
}

template <class T>
Ranks<T> all_reduce(World& w, const Ranks<T>& xs, Algo a, ReduceOp op = ReduceOp::kSum) {
  return run_in_place(
      w, xs, [&](Communicator& c, std::vector<T>& x) { c.all_reduce(std::span<T>(x), op, a); });
}

template <class T>
Ranks<T> reduce_scatter(World& w, const Ranks<T>& xs, Algo a) {
  const int n = w.size();
  const size_t len = xs[0].size();
  return run_out_of_place(
      w, xs, [&](int r) { return split_size(len, n, r); },
      [&](Communicator& c, const std::vector<T>& in, std::vector<T>& out) {
        c.reduce_scatter(std::span<const T>(in), std::span<T>(out), ReduceOp::kSum, a);
      });
}

TEST(DeterminismTest, TheDataMakesSummationOrderVisible) {
  // Guards the tests below against passing vacuously: on this data, summing in reverse
  // rank order gives different bits from summing in rank order.
  for (int n : {3, 8, 16}) {
    Ranks<float> xs = float_data<float>(n, 1000, 40 + n);
    const std::vector<float> forward = ref_reduction(xs, ReduceOp::kSum);
    std::reverse(xs.begin(), xs.end());
    EXPECT_FALSE(same_bits(forward, ref_reduction(xs, ReduceOp::kSum))) << "N=" << n;
  }
}

TEST(DeterminismTest, AllReduceIsBitwiseTheSequentialSumInRankOrder) {
  for (int n : sweep_sizes()) {
    TestWorld w(n);
    for (size_t len : sweep_lengths(n)) {
      SCOPED_TRACE(describe_case(n, len, "ordered all_reduce"));
      const Ranks<float> xs = float_data<float>(n, len, 50 * n + len);
      const Ranks<double> ds = float_data<double>(n, len, 60 * n + len);
      const Ranks<BFloat16> bs = float_data<BFloat16>(n, len, 70 * n + len, 4);
      for (Algo a : deterministic_algorithms(OpKind::kAllReduce)) {
        EXPECT_TRUE(bitwise_equal(all_reduce(w, xs, a), ref_all_reduce(xs, ReduceOp::kSum)))
            << to_string(a);
        EXPECT_TRUE(
            bitwise_equal(all_reduce(w, xs, a, ReduceOp::kAvg), ref_all_reduce(xs, ReduceOp::kAvg)))
            << to_string(a) << "/avg";
        EXPECT_TRUE(bitwise_equal(all_reduce(w, ds, a), ref_all_reduce(ds, ReduceOp::kSum)))
            << to_string(a) << "/double";
        EXPECT_TRUE(bitwise_equal(all_reduce(w, bs, a), ref_all_reduce(bs, ReduceOp::kSum)))
            << to_string(a) << "/bf16";
      }
    }
  }
}

TEST(DeterminismTest, ReduceScatterIsBitwiseTheSequentialSumInRankOrder) {
  for (int n : sweep_sizes()) {
    TestWorld w(n);
    for (size_t len : sweep_lengths(n)) {
      SCOPED_TRACE(describe_case(n, len, "ordered reduce_scatter"));
      const Ranks<float> xs = float_data<float>(n, len, 80 * n + len);
      for (Algo a : deterministic_algorithms(OpKind::kReduceScatter)) {
        EXPECT_TRUE(bitwise_equal(reduce_scatter(w, xs, a), ref_reduce_scatter(xs, ReduceOp::kSum)))
            << to_string(a);
      }
    }
  }
}

TEST(DeterminismTest, ReduceIsBitwiseTheSequentialSumInRankOrderAtEveryRoot) {
  for (int n : sweep_sizes()) {
    TestWorld w(n);
    for (size_t len : {size_t{1}, size_t{7}, size_t{1000}}) {
      SCOPED_TRACE(describe_case(n, len, "ordered reduce"));
      const Ranks<float> xs = float_data<float>(n, len, 90 * n + len);
      for (Algo a : deterministic_algorithms(OpKind::kReduce)) {
        for (int root = 0; root < n; ++root) {
          const Ranks<float> got = run_in_place(w, xs, [&](Communicator& c, std::vector<float>& x) {
            c.reduce(std::span<float>(x), root, ReduceOp::kSum, a);
          });
          EXPECT_TRUE(bitwise_equal(got, ref_reduce(xs, root, ReduceOp::kSum)))
              << to_string(a) << " root " << root;
        }
      }
    }
  }
}

TEST(DeterminismTest, ThreeRunsGiveTheSameBits) {
  for (int n : sizes_or({2, 5, 8, 16})) {
    const size_t len = 1000 + n;
    const Ranks<float> xs = float_data<float>(n, len, 200 + n);
    for (Algo a : deterministic_algorithms(OpKind::kAllReduce)) {
      Ranks<float> first;
      Ranks<float> first_rs;
      for (int run = 0; run < 3; ++run) {
        TestWorld w(n);  // a fresh world each time: different thread timing
        const Ranks<float> got = all_reduce(w, xs, a);
        // all_reduce `shared` has no reduce_scatter row: only its all_reduce runs.
        const bool has_rs = find_algorithm(OpKind::kReduceScatter, a) != nullptr;
        const Ranks<float> rs = has_rs ? reduce_scatter(w, xs, a) : Ranks<float>{};
        if (run == 0) {
          first = got;
          first_rs = rs;
          continue;
        }
        EXPECT_TRUE(bitwise_equal(got, first)) << to_string(a) << " N=" << n << " run " << run;
        EXPECT_TRUE(bitwise_equal(rs, first_rs)) << to_string(a) << " N=" << n << " run " << run;
      }
    }
  }
}

}  // namespace
}  // namespace dtsim::testing
