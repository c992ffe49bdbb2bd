// Subgroups: disjoint groups ({0,1} and {2,3}) made with new_group and with split run
// collectives at the same time with different data and never see each other's messages;
// a DP x TP grid where every rank alternates between its row group and its column group.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "runtime_test_util.h"

namespace dtsim::testing {
namespace {

// A mix of collectives on `g` whose results depend on the group's members: `iters`
// rounds, different sizes each round, checked on the spot against closed forms.
void exercise(Communicator& g, int iters, int salt) {
  const int n = g.size();
  int64_t members_sum = 0;
  for (int r : g.ranks()) members_sum += r;
  for (int i = 0; i < iters; ++i) {
    const size_t len = static_cast<size_t>(1 + (i * 37 + salt) % 300);
    std::vector<int64_t> v(len, g.global_rank() * 1000 + i);
    g.all_reduce(std::span<int64_t>(v), ReduceOp::kSum, i % 2 ? Algo::kRing : Algo::kAuto);
    for (int64_t x : v) ASSERT_EQ(x, members_sum * 1000 + int64_t{n} * i);

    std::vector<int64_t> b(len, g.rank() == i % n ? salt * 10 + i : -1);
    g.broadcast(std::span<int64_t>(b), i % n);
    for (int64_t x : b) ASSERT_EQ(x, salt * 10 + i);

    std::vector<int64_t> mine(split_size(len, n, g.rank()), g.global_rank());
    std::vector<int64_t> all(len);
    g.all_gather(std::span<const int64_t>(mine), std::span<int64_t>(all));
    for (int r = 0; r < n; ++r) {
      for (size_t k = 0; k < split_size(len, n, r); ++k) {
        ASSERT_EQ(all[split_offset(len, n, r) + k], g.global_rank(r));
      }
    }
  }
  g.barrier();
}

TEST(SubgroupTest, DisjointNewGroupsRunConcurrently) {
  TestWorld w(4);
  w.run([](Communicator& world) {
    auto a = world.new_group({0, 1});
    auto b = world.new_group({2, 3});
    Communicator* mine = world.rank() < 2 ? a.get() : b.get();
    ASSERT_NE(mine, nullptr);
    EXPECT_EQ(world.rank() < 2 ? b.get() : a.get(), nullptr);
    EXPECT_EQ(mine->size(), 2);
    EXPECT_EQ(mine->rank(), world.rank() % 2);
    exercise(*mine, 60, world.rank() < 2 ? 1 : 2);
    // The world communicator still works after (and interleaved with) the groups.
    std::vector<int32_t> v(3, 1);
    world.all_reduce(std::span<int32_t>(v));
    EXPECT_EQ(v[0], 4);
  });
}

TEST(SubgroupTest, DisjointSplitGroupsRunConcurrently) {
  for (int n : sizes_or({4, 8, 16})) {
    TestWorld w(n);
    w.run([&](Communicator& world) {
      const int color = world.rank() % 2;  // evens and odds, interleaved on the same channels
      auto g = world.split(color, world.rank());
      ASSERT_NE(g, nullptr);
      EXPECT_EQ(g->size(), n / 2);
      EXPECT_EQ(g->rank(), world.rank() / 2);
      for (int r = 0; r < g->size(); ++r) EXPECT_EQ(g->global_rank(r) % 2, color);
      exercise(*g, 30, color + 3);
    });
  }
}

TEST(SubgroupTest, SplitOrdersByKeyAndNegativeColorGetsNothing) {
  TestWorld w(6);
  w.run([](Communicator& world) {
    const int r = world.rank();
    auto g = world.split(r == 5 ? -1 : 0, -r);  // reversed order, rank 5 opts out
    if (r == 5) {
      EXPECT_EQ(g, nullptr);
      return;
    }
    ASSERT_NE(g, nullptr);
    EXPECT_EQ(g->size(), 5);
    EXPECT_EQ(g->rank(), 4 - r);
    std::vector<int32_t> v(1, g->rank() == 0 ? r : -1);
    g->broadcast(std::span<int32_t>(v), 0);
    EXPECT_EQ(v[0], 4);  // local rank 0 is global rank 4
  });
}

TEST(SubgroupTest, NewGroupWithInconsistentListsIsAUsageError) {
  WorldOptions o;
  o.timeout = std::chrono::milliseconds(2000);
  TestWorld w(4, o);
  try {
    w.run([](Communicator& world) {
      auto g = world.rank() == 3 ? world.new_group({0, 1, 3}) : world.new_group({0, 1, 2});
    });
    ADD_FAILURE() << "inconsistent new_group lists were accepted";
  } catch (const RankFailure& f) {
    EXPECT_THROW(std::rethrow_exception(f.cause()), UsageError) << f.what();
  }
  try {
    w.run([](Communicator& world) { auto g = world.new_group({0, 1, 1}); });
    ADD_FAILURE() << "a duplicate member was accepted";
  } catch (const RankFailure& f) {
    EXPECT_THROW(std::rethrow_exception(f.cause()), UsageError) << f.what();
  }
}

// DP x TP grid: rank = dp * tp_size + tp. The TP group (a row) holds the ranks of one
// replica; the DP group (a column) holds the same shard in every replica. Each step
// alternates: an all_reduce in the row, then one in the column, then all_gather in the row.
void run_grid(int dp_size, int tp_size) {
  const int n = dp_size * tp_size;
  TestWorld w(n);
  w.run([&](Communicator& world) {
    const int r = world.rank();
    const int dp = r / tp_size, tp = r % tp_size;
    auto row = world.split(dp, tp);  // TP group
    std::vector<int> col_ranks;
    for (int d = 0; d < dp_size; ++d) col_ranks.push_back(d * tp_size + tp);
    std::unique_ptr<Communicator> col;  // DP group: every rank makes every column group
    for (int t = 0; t < tp_size; ++t) {
      std::vector<int> ranks;
      for (int d = 0; d < dp_size; ++d) ranks.push_back(d * tp_size + t);
      auto g = world.new_group(ranks);
      if (g) col = std::move(g);
    }
    ASSERT_NE(row, nullptr);
    ASSERT_NE(col, nullptr);
    ASSERT_EQ(row->size(), tp_size);
    ASSERT_EQ(col->size(), dp_size);
    ASSERT_EQ(col->ranks(), col_ranks);
    for (int step = 0; step < 20; ++step) {
      const size_t len = static_cast<size_t>(5 + step * 13);
      std::vector<int64_t> a(len, r + step);
      row->all_reduce(std::span<int64_t>(a));
      int64_t row_sum = 0;
      for (int t = 0; t < tp_size; ++t) row_sum += dp * tp_size + t + step;
      for (int64_t x : a) ASSERT_EQ(x, row_sum);
      col->all_reduce(std::span<int64_t>(a), ReduceOp::kAvg);
      int64_t grid_sum = 0;
      for (int q = 0; q < n; ++q) grid_sum += q + step;
      for (int64_t x : a) ASSERT_EQ(x, grid_sum / dp_size);
      std::vector<int64_t> mine(split_size(len, tp_size, tp), tp * 100 + dp);
      std::vector<int64_t> gathered(len);
      row->all_gather(std::span<const int64_t>(mine), std::span<int64_t>(gathered));
      for (int t = 0; t < tp_size; ++t) {
        ASSERT_EQ(gathered[split_offset(len, tp_size, t)], t * 100 + dp);
      }
    }
  });
}

TEST(SubgroupTest, DataByTensorParallelGridTwoByTwo) { run_grid(2, 2); }
TEST(SubgroupTest, DataByTensorParallelGridFourByTwo) { run_grid(4, 2); }

TEST(SubgroupTest, GroupsOfAGroup) {
  TestWorld w(8);
  w.run([](Communicator& world) {
    auto half = world.split(world.rank() / 4, world.rank());  // {0..3}, {4..7}
    auto quarter = half->split(half->rank() / 2, half->rank());
    ASSERT_EQ(quarter->size(), 2);
    std::vector<int32_t> v(7, world.rank());
    quarter->all_reduce(std::span<int32_t>(v));
    const int base = world.rank() / 2 * 2;
    EXPECT_EQ(v[0], base + base + 1);
    half->all_reduce(std::span<int32_t>(v));
    const int h = world.rank() / 4 * 4;
    EXPECT_EQ(v[6], 2 * (4 * h + 6));  // each pair sum, counted by both members
  });
}

}  // namespace
}  // namespace dtsim::testing
