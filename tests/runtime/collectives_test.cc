// reduce_scatter, all_gather, broadcast, reduce and barrier, every algorithm, against the
// single-threaded reference for N in 1..8 and 16 and lengths {0, 1, 7, N - 1, 1000, large
// odd}. Integer-valued data keeps sums exact, so equality is bitwise.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "runtime_test_util.h"

namespace dtsim::testing {
namespace {

const std::vector<ReduceOp> kOps = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin};

template <class T>
Ranks<T> threaded_reduce_scatter(World& w, const Ranks<T>& xs, ReduceOp op, Algo algo) {
  const int n = w.size();
  const size_t len = xs[0].size();
  return run_out_of_place(
      w, xs, [&](int r) { return split_size(len, n, r); },
      [&](Communicator& c, const std::vector<T>& in, std::vector<T>& out) {
        c.reduce_scatter(std::span<const T>(in), std::span<T>(out), op, algo);
      });
}

template <class T>
Ranks<T> threaded_all_gather(World& w, const Ranks<T>& chunks, Algo algo) {
  size_t total = 0;
  for (const auto& c : chunks) total += c.size();
  return run_out_of_place(
      w, chunks, [&](int) { return total; },
      [&](Communicator& c, const std::vector<T>& in, std::vector<T>& out) {
        c.all_gather(std::span<const T>(in), std::span<T>(out), algo);
      });
}

// Rank r's chunk r (tensor_split) of a `total`-element gather.
template <class T>
Ranks<T> gather_inputs(int n, size_t total, uint64_t seed) {
  Ranks<T> full = int_data<T>(1, total, seed, 1000);
  Ranks<T> xs;
  for (int r = 0; r < n; ++r) xs.push_back(chunk_of(full[0], n, r));
  return xs;
}

TEST(ReduceScatterTest, EveryAlgorithmAndOpMatchesReference) {
  for (int n : sweep_sizes()) {
    TestWorld w(n);
    for (size_t len : sweep_lengths(n)) {
      SCOPED_TRACE(describe_case(n, len, "reduce_scatter"));
      for (Algo a : algorithms_to_test(OpKind::kReduceScatter)) {
        for (ReduceOp op : kOps) {
          const Ranks<int64_t> xs = int_data<int64_t>(n, len, 3 * n + len, int64_t{1} << 40);
          EXPECT_TRUE(
              bitwise_equal(threaded_reduce_scatter(w, xs, op, a), ref_reduce_scatter(xs, op)))
              << to_string(a) << "/" << to_string(op);
        }
        const Ranks<BFloat16> bs = int_data<BFloat16>(n, len, 5 * n + len);
        if (runs_bf16(a)) {
          EXPECT_TRUE(bitwise_equal(threaded_reduce_scatter(w, bs, ReduceOp::kSum, a),
                                    ref_reduce_scatter(bs, ReduceOp::kSum)))
              << to_string(a) << "/bf16";
        }
        const Ranks<float> fs = int_data<float>(n, len, 7 * n + len, 1 << 16);
        EXPECT_TRUE(bitwise_equal(threaded_reduce_scatter(w, fs, ReduceOp::kAvg, a),
                                  ref_reduce_scatter(fs, ReduceOp::kAvg)))
            << to_string(a) << "/float";
      }
    }
  }
}

TEST(AllGatherTest, EveryAlgorithmMatchesReference) {
  for (int n : sweep_sizes()) {
    TestWorld w(n);
    for (size_t len : sweep_lengths(n)) {
      SCOPED_TRACE(describe_case(n, len, "all_gather"));
      for (Algo a : algorithms_to_test(OpKind::kAllGather)) {
        const Ranks<int64_t> xs = gather_inputs<int64_t>(n, len, n + len);
        EXPECT_TRUE(bitwise_equal(threaded_all_gather(w, xs, a), ref_all_gather(xs)))
            << to_string(a);
        const Ranks<BFloat16> bs = gather_inputs<BFloat16>(n, len, 2 * n + len);
        if (runs_bf16(a)) {
          EXPECT_TRUE(bitwise_equal(threaded_all_gather(w, bs, a), ref_all_gather(bs)))
              << to_string(a) << "/bf16";
        }
      }
    }
  }
}

TEST(AllGatherTest, OfReduceScatterIsAllReduceForEveryLength) {
  for (int n : sweep_sizes()) {
    TestWorld w(n);
    for (size_t len : sweep_lengths(n)) {
      SCOPED_TRACE(describe_case(n, len, "AG(RS(x)) == AR(x)"));
      const Ranks<int32_t> xs = int_data<int32_t>(n, len, 9 * n + len, 1 << 20);
      const Ranks<int32_t> rs = threaded_reduce_scatter(w, xs, ReduceOp::kSum, Algo::kRing);
      EXPECT_TRUE(bitwise_equal(threaded_all_gather(w, rs, Algo::kRing),
                                ref_all_reduce(xs, ReduceOp::kSum)));
    }
  }
}

TEST(BroadcastTest, EveryAlgorithmAndRootMatchesReference) {
  for (int n : sweep_sizes()) {
    TestWorld w(n);
    for (size_t len : sweep_lengths(n)) {
      SCOPED_TRACE(describe_case(n, len, "broadcast"));
      for (Algo a : algorithms_to_test(OpKind::kBroadcast)) {
        for (int root = 0; root < n; ++root) {
          if (len == kLargeOdd && root % 3 != 0) continue;  // every root at smaller lengths
          const Ranks<double> xs = float_data<double>(n, len, 100 * root + len);
          const Ranks<double> got =
              run_in_place(w, xs, [&](Communicator& c, std::vector<double>& x) {
                c.broadcast(std::span<double>(x), root, a);
              });
          EXPECT_TRUE(bitwise_equal(got, ref_broadcast(xs, root)))
              << to_string(a) << " root " << root;
        }
      }
    }
  }
}

TEST(ReduceTest, EveryAlgorithmRootAndOpMatchesReference) {
  for (int n : sweep_sizes()) {
    TestWorld w(n);
    for (size_t len : sweep_lengths(n)) {
      SCOPED_TRACE(describe_case(n, len, "reduce"));
      for (Algo a : algorithms_to_test(OpKind::kReduce)) {
        for (int root = 0; root < n; ++root) {
          if (len == kLargeOdd && root % 3 != 0) continue;
          for (ReduceOp op : kOps) {
            if (len >= 1000 && op != ReduceOp::kSum && op != ReduceOp::kAvg) continue;
            const Ranks<int64_t> xs = int_data<int64_t>(n, len, 7 * root + len, int64_t{1} << 40);
            const Ranks<int64_t> got =
                run_in_place(w, xs, [&](Communicator& c, std::vector<int64_t>& x) {
                  c.reduce(std::span<int64_t>(x), root, op, a);
                });
            // Only the root gets the reduction; every other rank keeps its buffer.
            EXPECT_TRUE(bitwise_equal(got, ref_reduce(xs, root, op)))
                << to_string(a) << "/" << to_string(op) << " root " << root;
          }
        }
      }
    }
  }
}

TEST(BarrierTest, NoRankLeavesBeforeEveryRankHasEntered) {
  DTSIM_THREADS_ONLY();  // the ranks share their arrival flags
  for (int n : sweep_sizes()) {
    TestWorld w(n);
    for (int round = 0; round < 3; ++round) {
      std::vector<std::atomic<int>> entered(n);
      w.run([&](Communicator& c) {
        // Stagger the arrivals so that a broken barrier would let early ranks through.
        std::this_thread::sleep_for(std::chrono::microseconds(200 * ((c.rank() + round) % 4)));
        entered[c.rank()].store(1);
        c.barrier();
        for (int r = 0; r < n; ++r) {
          EXPECT_EQ(entered[r].load(), 1) << "rank " << c.rank() << " left before " << r;
        }
      });
    }
  }
}

}  // namespace
}  // namespace dtsim::testing
