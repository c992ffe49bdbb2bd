// The trace in causal order (runtime/diagnostics/trace.h), as `dtsim walk` prints it: a step is the
// set of sends that can happen at once, with every rank's buffer after it. Cases worked out by
// hand: the binomial trees on 8 ranks, tree all_reduce, recursive doubling on 3, all_to_all.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "runtime/communicator.h"
#include "runtime/diagnostics/trace.h"
#include "runtime/world.h"

namespace dtsim::testing {
namespace {

using Vec = std::vector<int64_t>;
using Sends = std::set<std::string>;

// Rank r's input: element i is (i + 1) * 10^r, so sums show who contributed.
Vec input(int r, size_t numel) {
  int64_t p = 1;
  for (int k = 0; k < r; ++k) p *= 10;
  Vec v(numel);
  for (size_t i = 0; i < numel; ++i) v[i] = static_cast<int64_t>(i + 1) * p;
  return v;
}

struct Walk {
  std::vector<Sends> sends;             // per step: "src->dst"
  std::vector<std::vector<Vec>> after;  // per step, per rank (empty: no snapshot yet)
};

Walk walk(int n, const std::function<void(Communicator&, Vec&)>& fn, size_t numel = 2) {
  WorldOptions o;
  o.trace = true;
  o.timeout = std::chrono::milliseconds(20000);
  World w(n, o);
  w.run([&](Communicator& c) {
    Vec v = input(c.rank(), numel);
    fn(c, v);
  });
  std::vector<const RankTrace*> traces;
  for (int r = 0; r < n; ++r) traces.push_back(&w.trace(r));
  Walk out;
  for (const CausalStep& st : causal_steps(traces)) {
    Sends s;
    for (const TraceEvent& e : st.sends)
      s.insert(std::to_string(e.src) + "->" + std::to_string(e.dst));
    out.sends.push_back(s);
    std::vector<Vec> bufs(n);
    for (int r = 0; r < n; ++r) {
      if (st.after[r] == nullptr) continue;
      bufs[r].resize(st.after[r]->bytes.size() / sizeof(int64_t));
      std::memcpy(bufs[r].data(), st.after[r]->bytes.data(), st.after[r]->bytes.size());
    }
    out.after.push_back(bufs);
  }
  return out;
}

TEST(CausalTrace, BroadcastTreeOnEightRanksDoublesTheHoldersEachStep) {
  const Walk w =
      walk(8, [](Communicator& c, Vec& v) { c.broadcast(std::span<int64_t>(v), 0, Algo::kTree); });
  ASSERT_EQ(w.sends.size(), 3u);
  EXPECT_EQ(w.sends[0], (Sends{"0->4"}));
  EXPECT_EQ(w.sends[1], (Sends{"0->2", "4->6"}));
  EXPECT_EQ(w.sends[2], (Sends{"0->1", "2->3", "4->5", "6->7"}));
  // After step k exactly 2^(k+1) ranks hold the root's data; the rest have no snapshot
  // yet (their buffer is still their input).
  const std::vector<std::set<int>> holders = {{4}, {2, 4, 6}, {1, 2, 3, 4, 5, 6, 7}};
  for (int k = 0; k < 3; ++k) {
    for (int r = 1; r < 8; ++r) {
      SCOPED_TRACE("step " + std::to_string(k) + " rank " + std::to_string(r));
      if (holders[k].count(r)) {
        EXPECT_EQ(w.after[k][r], input(0, 2));
      } else {
        EXPECT_TRUE(w.after[k][r].empty());
      }
    }
  }
}

// At every world size: L = ceil(log2 N) steps, and step k sends to the ranks (renumbered
// from the root) that are odd multiples of 2^(L-1-k), so after it the ranks at multiples
// of 2^(L-1-k), ceil(N / 2^(L-1-k)) of them, hold the data: doubling when N is a power
// of two. From any root.
TEST(CausalTrace, BroadcastTreeDoublesTheHoldersAtEveryWorldSize) {
  for (int n : {1, 2, 3, 4, 5, 8, 16}) {
    for (int root : {0, n - 1}) {
      SCOPED_TRACE("N=" + std::to_string(n) + " root " + std::to_string(root));
      const Walk w = walk(n, [&](Communicator& c, Vec& v) {
        c.broadcast(std::span<int64_t>(v), root, Algo::kTree);
      });
      int levels = 0;
      while ((1 << levels) < n) ++levels;
      ASSERT_EQ(static_cast<int>(w.sends.size()), levels);
      for (int k = 0; k < levels; ++k) {
        int holders = 1;  // the root
        for (int r = 0; r < n; ++r) {
          if (r != root && !w.after[k][r].empty()) {
            EXPECT_EQ(w.after[k][r], input(root, 2));
            ++holders;
          }
        }
        const int stride = 1 << (levels - 1 - k);
        EXPECT_EQ(holders, (n + stride - 1) / stride) << "step " << k;
      }
    }
  }
}

TEST(CausalTrace, ReduceTreeOnEightRanksHalvesTheSendersEachStep) {
  const Walk w = walk(8, [](Communicator& c, Vec& v) {
    c.reduce(std::span<int64_t>(v), 0, ReduceOp::kSum, Algo::kTree);
  });
  ASSERT_EQ(w.sends.size(), 3u);
  EXPECT_EQ(w.sends[0], (Sends{"1->0", "3->2", "5->4", "7->6"}));
  EXPECT_EQ(w.sends[1], (Sends{"2->0", "6->4"}));
  EXPECT_EQ(w.sends[2], (Sends{"4->0"}));
  // Partial sums: after step 0 rank 2 holds ranks 2 + 3; after step 1 rank 4 holds 4..7.
  EXPECT_EQ(w.after[0][2], (Vec{1100, 2200}));
  EXPECT_EQ(w.after[0][0], (Vec{11, 22}));
  EXPECT_EQ(w.after[1][4], (Vec{11110000, 22220000}));
  EXPECT_EQ(w.after[1][0], (Vec{1111, 2222}));
  EXPECT_EQ(w.after[2][0], (Vec{11111111, 22222222}));
}

TEST(CausalTrace, TreeAllReduceReducesThenBroadcastsWithBuffersInBothPhases) {
  const Walk w = walk(8, [](Communicator& c, Vec& v) {
    c.all_reduce(std::span<int64_t>(v), ReduceOp::kSum, Algo::kTree);
  });
  ASSERT_EQ(w.sends.size(), 6u);
  EXPECT_EQ(w.sends[0], (Sends{"1->0", "3->2", "5->4", "7->6"}));
  EXPECT_EQ(w.sends[2], (Sends{"4->0"}));
  EXPECT_EQ(w.sends[3], (Sends{"0->4"}));
  EXPECT_EQ(w.sends[4], (Sends{"0->2", "4->6"}));
  EXPECT_EQ(w.sends[5].size(), 4u);
  EXPECT_EQ(w.after[0][6], (Vec{11000000, 22000000}));  // the reduce phase shows buffers
  for (int r = 0; r < 8; ++r) EXPECT_EQ(w.after[5][r], (Vec{11111111, 22222222})) << r;
}

TEST(CausalTrace, RecursiveDoublingOnThreeRanksPairsUpThenHandsBack) {
  const Walk w = walk(3, [](Communicator& c, Vec& v) {
    c.all_reduce(std::span<int64_t>(v), ReduceOp::kSum, Algo::kRecursiveDoubling);
  });
  // Rank 0 hands its data to rank 1 while rank 2 sends to its exchange partner, rank 1;
  // rank 1 answers rank 2 once it has rank 0's data, then hands the result back to 0.
  ASSERT_EQ(w.sends.size(), 3u);
  EXPECT_EQ(w.sends[0], (Sends{"0->1", "2->1"}));
  EXPECT_EQ(w.sends[1], (Sends{"1->2"}));
  EXPECT_EQ(w.sends[2], (Sends{"1->0"}));
  EXPECT_EQ(w.after[0][1], (Vec{111, 222}));
  EXPECT_TRUE(w.after[0][2].empty());
  EXPECT_EQ(w.after[1][2], (Vec{111, 222}));
  EXPECT_TRUE(w.after[1][0].empty());
  EXPECT_EQ(w.after[2][0], (Vec{111, 222}));
}

TEST(CausalTrace, AllToAllIsAPermutationPerStep) {
  const int n = 4;
  const Walk w = walk(
      n,
      [&](Communicator& c, Vec& v) {
        Vec out(v.size());
        c.all_to_all(std::span<const int64_t>(v), std::span<int64_t>(out));
      },
      4);
  ASSERT_EQ(w.sends.size(), 3u);
  for (int k = 0; k < 3; ++k) {
    Sends want;
    for (int r = 0; r < n; ++r)
      want.insert(std::to_string(r) + "->" + std::to_string((r + k + 1) % n));
    EXPECT_EQ(w.sends[k], want) << "step " << k;
  }
  // After step 0 rank 1 holds its own block (position 1) and rank 0's (position 0).
  EXPECT_EQ(w.after[0][1], (Vec{2, 20, 0, 0}));
  EXPECT_EQ(w.after[2][1], (Vec{2, 20, 200, 2000}));
}

TEST(CausalTrace, RingAllReduceKeepsTheLessonsSteps) {
  const int n = 4;
  const Walk w = walk(
      n,
      [](Communicator& c, Vec& v) {
        c.all_reduce(std::span<int64_t>(v), ReduceOp::kSum, Algo::kRing);
      },
      4);
  ASSERT_EQ(w.sends.size(), 2u * (n - 1));
  for (const Sends& s : w.sends) EXPECT_EQ(s, (Sends{"0->1", "1->2", "2->3", "3->0"}));
  for (int r = 0; r < n; ++r) EXPECT_EQ(w.after.back()[r], (Vec{1111, 2222, 3333, 4444}));
}

}  // namespace
}  // namespace dtsim::testing
