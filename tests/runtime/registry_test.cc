// The algorithm registry (runtime/algorithms/registry.h): names round-trip, every
// collective has rows and an auto rule that lands on one of them, and an algorithm a
// collective does not have is a usage error that lists the ones it has.
#include <gtest/gtest.h>

#include <string>

#include "runtime/algorithms/registry.h"
#include "runtime/communicator.h"
#include "runtime/world.h"

namespace dtsim::testing {
namespace {

TEST(Registry, NamesRoundTripAndAliasesParse) {
  for (const AlgoName& n : algo_names()) {
    Algo a;
    ASSERT_TRUE(parse_algo(n.name, &a)) << n.name;
    EXPECT_EQ(a, n.algo);
    EXPECT_STREQ(to_string(a), n.name);
  }
  Algo a;
  ASSERT_TRUE(parse_algo("recursive_doubling", &a));
  EXPECT_EQ(a, Algo::kRecursiveDoubling);
  EXPECT_FALSE(parse_algo("ringg", &a));
}

TEST(Registry, EveryCollectiveHasRowsAndAutoPicksOne) {
  for (OpKind op : collectives()) {
    SCOPED_TRACE(to_string(op));
    EXPECT_FALSE(algorithms_of(op).empty());
    for (size_t bytes : {size_t{0}, size_t{1} << 10, size_t{1} << 20, SIZE_MAX}) {
      for (int ranks : {1, 2, 3, 4, 8, 16, 64}) {
        const AlgoRow& row = algorithm_for(op, Algo::kAuto, bytes, ranks);
        EXPECT_EQ(row.op, op);
        EXPECT_NE(row.run, nullptr);
      }
    }
  }
  EXPECT_EQ(resolve_algorithm(OpKind::kAllReduce, Algo::kAuto, 1024, 4), Algo::kRecursiveDoubling);
  EXPECT_EQ(resolve_algorithm(OpKind::kAllReduce, Algo::kAuto, 1 << 20, 4), Algo::kShared);
}

// A tiny all_reduce among 3 to 32 ranks is one step of direct sends; at 2 ranks rd is
// one exchange already, and at 64 ranks the N - 1 sends cost more than log2 N rounds.
TEST(Registry, AutoSendsTinyAllReducesDirectAtThreeToThirtyTwoRanks) {
  for (int ranks : {1, 2, 3, 4, 8, 16, 32, 33, 64}) {
    SCOPED_TRACE(ranks);
    const bool direct = ranks >= 3 && ranks <= 32;
    EXPECT_EQ(resolve_algorithm(OpKind::kAllReduce, Algo::kAuto, 8, ranks),
              direct ? Algo::kDirect : Algo::kRecursiveDoubling);
    EXPECT_EQ(resolve_algorithm(OpKind::kAllReduce, Algo::kAuto, 64, ranks),
              direct ? Algo::kDirect : Algo::kRecursiveDoubling);
    EXPECT_EQ(resolve_algorithm(OpKind::kAllReduce, Algo::kAuto, 65, ranks),
              Algo::kRecursiveDoubling);
  }
  EXPECT_EQ(auto_rule(OpKind::kAllReduce),
            "direct up to 64 B at 3 to 32 ranks, rd up to 32 KiB, else shared");
}

TEST(Registry, AnAlgorithmTheCollectiveLacksIsAUsageErrorListingItsOwn) {
  EXPECT_EQ(algorithm_error(OpKind::kReduceScatter, Algo::kRecursiveDoubling),
            "reduce_scatter has no 'rd' algorithm; use auto, ring, direct or deterministic");
  EXPECT_EQ(algorithm_error(OpKind::kAllToAll, Algo::kRecursiveDoubling),
            "all_to_all has no 'rd' algorithm; use auto or direct");
  EXPECT_EQ(algorithm_error(OpKind::kAllReduce, Algo::kTree), "");
  World w(2);
  EXPECT_THROW(w.run([](Communicator& c) {
    float in[2] = {1, 2}, out[1];
    c.reduce_scatter(std::span<const float>(in), std::span<float>(out), ReduceOp::kSum,
                     Algo::kRecursiveDoubling);
  }),
               RankFailure);
}

TEST(Registry, MpiRowsNeedAnMpiWorldAndTheThreadWorldRefusesThem) {
  for (OpKind op : {OpKind::kAllReduce, OpKind::kReduceScatter, OpKind::kAllGather,
                    OpKind::kBroadcast, OpKind::kReduce}) {
    SCOPED_TRACE(to_string(op));
    const AlgoRow* row = find_algorithm(op, Algo::kMpi);
    ASSERT_NE(row, nullptr);
    EXPECT_EQ(row->needs, kWorldMpi);
    EXPECT_EQ(algorithm_error(op, Algo::kMpi, kWorldMpi), "");
  }
  EXPECT_EQ(algorithm_error(OpKind::kAllReduce, Algo::kMpi),
            "all_reduce 'mpi' runs only in an MPI world of one rank per process (mpirun -np N, "
            "without --threads-per-process); here use auto, ring, rd, tree, direct, "
            "deterministic or shared");
  EXPECT_EQ(algorithm_list(OpKind::kBroadcast, true, kWorldMpi), "auto, tree, direct or mpi");
  Algo a = Algo::kAuto;
  ASSERT_TRUE(parse_algo("mpi", &a));
  EXPECT_EQ(a, Algo::kMpi);
  World w(2);  // the thread world: refused at the call, before any message
  EXPECT_THROW(w.run([](Communicator& c) {
    float x[2] = {1, 2};
    c.all_reduce(std::span<float>(x), ReduceOp::kSum, Algo::kMpi);
  }),
               RankFailure);
}

TEST(Registry, ZeroFollowsTheAllReduceAlgorithmWhereTheCollectiveHasIt) {
  EXPECT_EQ(algorithm_or_auto(OpKind::kReduceScatter, Algo::kDeterministic), Algo::kDeterministic);
  EXPECT_EQ(algorithm_or_auto(OpKind::kReduceScatter, Algo::kRecursiveDoubling), Algo::kAuto);
  EXPECT_EQ(algorithm_or_auto(OpKind::kAllGather, Algo::kDeterministic), Algo::kAuto);
}

TEST(Registry, CountersSayWhatAutoPicked) {
  World w(4);
  w.run([](Communicator& c) {
    std::vector<float> small(16, 1.0f), large(1 << 14, 1.0f);
    c.all_reduce(std::span<float>(small));
    c.all_reduce(std::span<float>(large));
    c.all_reduce(std::span<float>(small), ReduceOp::kSum, Algo::kTree);
  });
  const OpCounters& c = w.counters(0)[OpKind::kAllReduce];
  const auto bit = [](Algo a) { return 1u << static_cast<int>(a); };
  EXPECT_EQ(c.algos(), bit(Algo::kDirect) | bit(Algo::kShared) | bit(Algo::kTree));
  EXPECT_EQ(c.auto_algos(), bit(Algo::kDirect) | bit(Algo::kShared));
  EXPECT_EQ(c.algo_calls[static_cast<int>(Algo::kDirect)], 1u);
  EXPECT_EQ(c.auto_calls[static_cast<int>(Algo::kTree)], 0u);
}

// `shared` lends whole buffers; below WorldOptions::lend_bytes (64 KiB) it runs as its
// bitwise twin `deterministic`, and the counters say so, asked for by name or by auto.
TEST(Registry, CountersSayDeterministicWhereSharedCannotLend) {
  World w(4);
  w.run([](Communicator& c) {
    std::vector<float> mid(12 << 10, 1.0f), large(16 << 10, 1.0f);  // 48 and 64 KiB
    c.all_reduce(std::span<float>(mid));
    c.all_reduce(std::span<float>(mid), ReduceOp::kSum, Algo::kShared);
    c.all_reduce(std::span<float>(large), ReduceOp::kSum, Algo::kShared);
    EXPECT_EQ(mid[0], 16.0f);
  });
  const OpCounters& c = w.counters(0)[OpKind::kAllReduce];
  EXPECT_EQ(c.algo_calls[static_cast<int>(Algo::kDeterministic)], 2u);
  EXPECT_EQ(c.auto_calls[static_cast<int>(Algo::kDeterministic)], 1u);
  EXPECT_EQ(c.algo_calls[static_cast<int>(Algo::kShared)], 1u);
  EXPECT_EQ(c.auto_calls[static_cast<int>(Algo::kShared)], 0u);
}

}  // namespace
}  // namespace dtsim::testing
