// Traffic accounting: the per-rank counters of every collective against the volume its
// algorithm must move. Everything is read from World::counters after the run.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "runtime_test_util.h"

namespace dtsim::testing {
namespace {

constexpr size_t kF = sizeof(float);

// Runs fn on every rank of a fresh World(n) and returns each rank's counters for `op`.
std::vector<OpCounters> measure(int n, OpKind op, const std::function<void(Communicator&)>& fn) {
  World w(n);
  w.run(fn);
  std::vector<OpCounters> out;
  for (int r = 0; r < n; ++r) out.push_back(w.counters(r)[op]);
  return out;
}

uint64_t total_sent(const std::vector<OpCounters>& c) {
  uint64_t s = 0;
  for (const auto& x : c) s += x.bytes_sent;
  return s;
}

uint64_t total_recv(const std::vector<OpCounters>& c) {
  uint64_t s = 0;
  for (const auto& x : c) s += x.bytes_recv;
  return s;
}

TEST(TrafficTest, RingReduceScatterAndAllGatherMoveNMinusOneOverNPerRank) {
  for (int n : {2, 3, 4, 8}) {
    const size_t numel = 24 * static_cast<size_t>(n);
    const auto rs = measure(n, OpKind::kReduceScatter, [&](Communicator& c) {
      std::vector<float> in(numel, 1.0f), out(numel / n);
      c.reduce_scatter(std::span<const float>(in), std::span<float>(out), ReduceOp::kSum,
                       Algo::kRing);
    });
    const auto ag = measure(n, OpKind::kAllGather, [&](Communicator& c) {
      std::vector<float> in(numel / n, 1.0f), out(numel);
      c.all_gather(std::span<const float>(in), std::span<float>(out), Algo::kRing);
    });
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(rs[r].bytes_sent, (n - 1) * numel / n * kF) << "N=" << n;
      EXPECT_EQ(ag[r].bytes_sent, (n - 1) * numel / n * kF) << "N=" << n;
      EXPECT_EQ(rs[r].msgs_sent, static_cast<uint64_t>(n - 1));
      EXPECT_EQ(rs[r].steps, static_cast<uint64_t>(n - 1));
      EXPECT_EQ(ag[r].steps, static_cast<uint64_t>(n - 1));
      EXPECT_EQ(rs[r].calls, 1u);
    }
    EXPECT_EQ(total_recv(rs), total_sent(rs));
    EXPECT_EQ(total_recv(ag), total_sent(ag));
  }
}

TEST(TrafficTest, AllReduceVolumePerAlgorithm) {
  for (int n : {2, 4, 5, 8}) {
    const size_t numel = 40 * static_cast<size_t>(n);
    const auto run = [&](Algo a) {
      return measure(n, OpKind::kAllReduce, [&](Communicator& c) {
        std::vector<float> v(numel, 1.0f);
        c.all_reduce(std::span<float>(v), ReduceOp::kSum, a);
      });
    };
    const auto ring = run(Algo::kRing);
    const auto det = run(Algo::kDeterministic);
    const auto direct = run(Algo::kDirect);
    const auto tree = run(Algo::kTree);
    for (int r = 0; r < n; ++r) {
      SCOPED_TRACE(describe_case(n, numel, "rank traffic"));
      EXPECT_EQ(ring[r].bytes_sent, 2 * (n - 1) * numel / n * kF);
      EXPECT_EQ(det[r].bytes_sent, 2 * (n - 1) * numel / n * kF);  // same as the ring
      EXPECT_EQ(direct[r].bytes_sent, (n - 1) * numel * kF);
      EXPECT_EQ(direct[r].msgs_sent, static_cast<uint64_t>(n - 1));
      EXPECT_EQ(direct[r].steps, 1u);
    }
    // A tree reduce then broadcast moves every buffer but the root's twice.
    EXPECT_EQ(total_sent(tree), 2 * (n - 1) * numel * kF);
    for (const auto* c : {&ring, &det, &direct, &tree}) {
      EXPECT_EQ(total_recv(*c), total_sent(*c));
    }
    if ((n & (n - 1)) == 0) {
      const auto rd = run(Algo::kRecursiveDoubling);
      int log2n = 0;
      while ((1 << log2n) < n) ++log2n;
      for (int r = 0; r < n; ++r) {
        EXPECT_EQ(rd[r].bytes_sent, log2n * numel * kF);
        EXPECT_EQ(rd[r].steps, static_cast<uint64_t>(log2n));
      }
    }
  }
}

// The shared-memory all_reduce counts what crosses rank boundaries: each rank reads its
// chunk from every peer and writes it back, 2(N-1)/N of the buffer, like the ring (the
// lends of whole buffers move nothing). Uneven lengths: chunk sizes differ by one.
TEST(TrafficTest, SharedAllReduceCountsTheChunksItMoves) {
  for (int n : {2, 3, 4, 8}) {
    for (size_t numel : {40 * static_cast<size_t>(n), 40 * static_cast<size_t>(n) + 3}) {
      WorldOptions o;
      o.lend_bytes = 1;  // every length runs shared, not its deterministic fallback
      World w(n, o);
      w.run([&](Communicator& c) {
        std::vector<float> v(numel, 1.0f);
        c.all_reduce(std::span<float>(v), ReduceOp::kSum, Algo::kShared);
        ASSERT_EQ(v[0], static_cast<float>(n));
      });
      uint64_t sent = 0, recv = 0;
      for (int r = 0; r < n; ++r) {
        SCOPED_TRACE(describe_case(n, numel, "shared all_reduce traffic"));
        const OpCounters& c = w.counters(r)[OpKind::kAllReduce];
        const size_t chunk = numel / n + (static_cast<size_t>(r) < numel % n ? 1 : 0);
        EXPECT_EQ(c.bytes_sent, 2 * (n - 1) * chunk * kF);
        EXPECT_EQ(c.bytes_recv, 2 * (numel - chunk) * kF);
        sent += c.bytes_sent;
        recv += c.bytes_recv;
      }
      EXPECT_EQ(sent, recv);
      EXPECT_EQ(sent, 2 * (n - 1) * numel * kF);  // N ranks x 2(N-1)/N of the buffer
    }
  }
}

TEST(TrafficTest, RootedCollectivesMoveNMinusOneBuffers) {
  for (int n : {2, 3, 7, 8}) {
    const size_t numel = 100;
    for (Algo a : {Algo::kTree, Algo::kDirect}) {
      const auto b = measure(n, OpKind::kBroadcast, [&](Communicator& c) {
        std::vector<float> v(numel);
        c.broadcast(std::span<float>(v), n - 1, a);
      });
      const auto rd = measure(n, OpKind::kReduce, [&](Communicator& c) {
        std::vector<float> v(numel);
        c.reduce(std::span<float>(v), 1 % n, ReduceOp::kSum, a);
      });
      EXPECT_EQ(total_sent(b), (n - 1) * numel * kF) << to_string(a) << " N=" << n;
      EXPECT_EQ(total_sent(rd), (n - 1) * numel * kF) << to_string(a) << " N=" << n;
      EXPECT_EQ(b[n - 1].bytes_recv, 0u);   // the root receives nothing
      EXPECT_EQ(rd[1 % n].bytes_sent, 0u);  // the destination sends nothing
    }
  }
}

TEST(TrafficTest, AllToAllSendsEverythingButTheOwnChunk) {
  for (int n : {2, 4, 8}) {
    const size_t numel = 16 * static_cast<size_t>(n);
    const auto a2a = measure(n, OpKind::kAllToAll, [&](Communicator& c) {
      std::vector<int32_t> in(numel), out(numel);
      c.all_to_all(std::span<const int32_t>(in), std::span<int32_t>(out));
    });
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(a2a[r].bytes_sent, (n - 1) * numel / n * sizeof(int32_t));
      EXPECT_EQ(a2a[r].msgs_sent, static_cast<uint64_t>(n - 1));
    }
  }
}

TEST(TrafficTest, CountersAddUpOverCallsAndCommunicators) {
  World w(4);
  w.run([](Communicator& c) {
    std::vector<float> v(8, 1.0f);
    for (int i = 0; i < 5; ++i) c.all_reduce(std::span<float>(v), ReduceOp::kSum, Algo::kRing);
    auto g = c.split(c.rank() % 2, c.rank());
    g->all_reduce(std::span<float>(v), ReduceOp::kSum, Algo::kRing);
  });
  for (int r = 0; r < 4; ++r) {
    const OpCounters& c = w.counters(r)[OpKind::kAllReduce];
    EXPECT_EQ(c.calls, 6u);
    // 5 world rings of 8 floats (6 chunks of 2 each) + one 2-rank ring (2 chunks of 4).
    EXPECT_EQ(c.bytes_sent, (5 * 6 * 2 + 2 * 4) * kF);
  }
}

TEST(TrafficTest, PointToPointCounters) {
  World w(2);
  w.run([](Communicator& c) {
    std::vector<double> v(10);
    if (c.rank() == 0) {
      c.send(std::span<const double>(v), 1);
      c.send(std::span<const double>(v.data(), 3), 1, 5);
    } else {
      c.recv(std::span<double>(v.data(), 3), 0, 5);
      c.recv(std::span<double>(v), 0);
    }
  });
  EXPECT_EQ(w.counters(0)[OpKind::kSend].bytes_sent, 13 * sizeof(double));
  EXPECT_EQ(w.counters(0)[OpKind::kSend].msgs_sent, 2u);
  EXPECT_EQ(w.counters(1)[OpKind::kRecv].bytes_recv, 13 * sizeof(double));
  EXPECT_EQ(w.counters(1)[OpKind::kRecv].msgs_recv, 2u);
  EXPECT_EQ(w.counters(1)[OpKind::kSend].bytes_sent, 0u);
}

// Per (communicator, peer) traffic: a ring all_reduce sends only to the next rank, a named
// split group gets its own entry named kind[members], and the per-peer counts add up to
// the per-op counters.
class PeerTrafficTest : public ::testing::TestWithParam<int> {};

TEST_P(PeerTrafficTest, RingSendsOnlyToTheNextRankAndGroupsAreNamed) {
  const int n = GetParam();
  World w(n);
  w.run([](Communicator& c) {
    std::vector<float> v(6 * static_cast<size_t>(c.size()), 1.0f);
    c.all_reduce(std::span<float>(v), ReduceOp::kSum, Algo::kRing);
    auto g = c.split(c.rank() % 2, c.rank(), "dp");
    g->all_reduce(std::span<float>(v), ReduceOp::kSum, Algo::kRing);
  });
  for (int r = 0; r < n; ++r) {
    const RankCounters& rc = w.counters(r);
    ASSERT_EQ(rc.groups.size(), 2u) << "rank " << r;
    const GroupTraffic& world = rc.groups[0];
    EXPECT_EQ(world.name, "world");
    ASSERT_EQ(world.peers.size(), static_cast<size_t>(n));
    uint64_t sent = 0, msgs = 0, recv = 0;
    for (int p = 0; p < n; ++p) {
      const PeerTraffic& t = world.peers[p];
      const bool next = n > 1 && p == (r + 1) % n;
      const bool prev = n > 1 && p == (r + n - 1) % n;
      // The ring all_reduce: 2(N-1) chunks of 6 floats to the next rank (and from the
      // previous one); split's ring all_gather of (color, key): N-1 chunks of 2 int64.
      const size_t bytes = 2 * (n - 1) * 6 * kF + (n - 1) * 2 * sizeof(int64_t);
      EXPECT_EQ(t.bytes_sent, next ? bytes : 0) << r << "->" << p;
      EXPECT_EQ(t.msgs_sent, next ? 3u * (n - 1) : 0u) << r << "->" << p;
      EXPECT_EQ(t.bytes_recv, prev ? bytes : 0) << p << "->" << r;
    }
    const GroupTraffic& dp = rc.groups[1];
    std::string members;
    for (int m = r % 2; m < n; m += 2) members += (members.empty() ? "" : ",") + std::to_string(m);
    EXPECT_EQ(dp.name, "dp[" + members + "]");
    ASSERT_EQ(dp.peers.size(), dp.ranks.size());
    for (const GroupTraffic& g : rc.groups) {
      for (const PeerTraffic& t : g.peers) {
        sent += t.bytes_sent;
        msgs += t.msgs_sent;
        recv += t.bytes_recv;
      }
    }
    const OpCounters total = rc.total();
    EXPECT_EQ(sent, total.bytes_sent);
    EXPECT_EQ(msgs, total.msgs_sent);
    EXPECT_EQ(recv, total.bytes_recv);
    if (n > 1) {
      EXPECT_GT(rc[OpKind::kAllReduce].nanos, 0u);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, PeerTrafficTest, ::testing::Values(1, 2, 3, 4, 8, 16),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return "N" + std::to_string(i.param);
                         });

TEST(TrafficTest, PointToPointCountsPerPeer) {
  World w(3);
  w.run([](Communicator& c) {
    std::vector<double> v(10);
    if (c.rank() == 0) {
      c.send(std::span<const double>(v), 2);
      c.send(std::span<const double>(v.data(), 3), 2, 5);
    } else if (c.rank() == 2) {
      c.recv(std::span<double>(v.data(), 3), 0, 5);
      c.recv(std::span<double>(v), 0);
    }
  });
  const GroupTraffic& sender = w.counters(0).groups.at(0);
  EXPECT_EQ(sender.peers[2].bytes_sent, 13 * sizeof(double));
  EXPECT_EQ(sender.peers[2].msgs_sent, 2u);
  EXPECT_EQ(sender.peers[1].msgs_sent, 0u);
  const GroupTraffic& receiver = w.counters(2).groups.at(0);
  EXPECT_EQ(receiver.peers[0].bytes_recv, 13 * sizeof(double));
  EXPECT_EQ(receiver.peers[0].msgs_recv, 2u);
}

}  // namespace
}  // namespace dtsim::testing
