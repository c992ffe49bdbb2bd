// Lending (Transport::lend / settle, Exchange::send_or_lend): the receiver reads the
// sender's buffer in place, and the sender may not touch it until the receiver released
// it. The ring collectives lend large chunks; here every chunk is lent (lend_bytes = 1).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <numeric>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "runtime/exchange.h"
#include "runtime/world.h"
#include "runtime_test_util.h"

namespace dtsim::testing {
namespace {

using std::chrono::milliseconds;

WorldOptions lend_everything(milliseconds timeout = milliseconds(10000)) {
  WorldOptions o;
  o.lend_bytes = 1;
  o.timeout = timeout;
  return o;
}

Signature test_sig(size_t count) {
  Signature s;
  s.op = OpKind::kAllReduce;
  s.dtype = DType::kInt32;
  s.count = count;
  return s;
}

// Ring all_reduce and all_gather with every chunk lent give the reference result, at
// uneven lengths, with the same world reused (the lend counters carry over between runs).
TEST(Lend, RingCollectivesWithEveryChunkLentMatchTheReference) {
  for (int n : {1, 2, 3, 4, 8, 16}) {
    World w(n, lend_everything());
    for (size_t len : sweep_lengths(n)) {
      for (int round = 0; round < 2; ++round) {
        std::vector<std::vector<int32_t>> reduced(n), gathered(n);
        w.run([&](Communicator& c) {
          std::vector<int32_t> x(len);
          for (size_t i = 0; i < len; ++i) x[i] = int32_t((c.rank() + 1) * (i % 1000 + round));
          c.all_reduce(std::span<int32_t>(x), ReduceOp::kSum, Algo::kRing);
          reduced[c.rank()] = x;
          std::vector<int32_t> mine(split_size(len, n, c.rank()), c.rank() + 7);
          std::vector<int32_t> all(len);
          c.all_gather(std::span<const int32_t>(mine), std::span<int32_t>(all), Algo::kRing);
          gathered[c.rank()] = all;
        });
        const int32_t ranks_sum = n * (n + 1) / 2;
        for (int r = 0; r < n; ++r) {
          ASSERT_EQ(reduced[r].size(), len);
          for (size_t i = 0; i < len; ++i) {
            ASSERT_EQ(reduced[r][i], ranks_sum * int32_t(i % 1000 + round))
                << "N=" << n << " len=" << len << " rank " << r << " element " << i;
          }
          for (int q = 0; q < n; ++q) {
            const size_t off = split_offset(len, n, q), cnt = split_size(len, n, q);
            for (size_t i = off; i < off + cnt; ++i) {
              ASSERT_EQ(gathered[r][i], q + 7) << "N=" << n << " len=" << len << " rank " << r;
            }
          }
        }
      }
    }
  }
}

// The lender's settle() returns only after the receiver released the message, and until
// then the receiver reads the lender's own bytes, not a copy.
TEST(Lend, SettleWaitsForTheReceiversRelease) {
  World w(2, lend_everything());
  std::atomic<const void*> lent_from{nullptr};
  std::atomic<bool> releasing{false};
  bool settled_after_release = false;
  bool read_in_place = false;
  w.run([&](Communicator& c) {
    std::vector<int32_t> buf(64, 5);
    Exchange ex(c, test_sig(buf.size()));
    if (c.rank() == 0) {
      lent_from = buf.data();
      ex.send_or_lend(1, 0, buf.data(), buf.size());
      ex.settle();
      settled_after_release = releasing.load();
    } else {
      Message m = ex.recv(0, 0, buf.size());
      std::this_thread::sleep_for(milliseconds(50));  // the lender is in settle() by now
      read_in_place = m.lent && m.data == lent_from.load();
      releasing = true;
      ex.release(0, m);
    }
  });
  EXPECT_TRUE(read_in_place);
  EXPECT_TRUE(settled_after_release);
}

// A receiver that fails while holding a lent message releases the lender with the
// world's abort, long before the deadline.
TEST(Lend, AReceiverThatFailsHoldingALentMessageDoesNotHangTheLender) {
  World w(2, lend_everything());
  const auto t0 = std::chrono::steady_clock::now();
  try {
    w.run([&](Communicator& c) {
      std::vector<int32_t> buf(64, 5);
      Exchange ex(c, test_sig(buf.size()));
      if (c.rank() == 0) {
        ex.send_or_lend(1, 0, buf.data(), buf.size());
        ex.settle();
      } else {
        const Message m = ex.recv(0, 0, buf.size());
        if (m.lent) throw std::runtime_error("rank 1 fails holding the lent message");
        ADD_FAILURE() << "a 256-byte payload with lend_bytes = 1 came as a copy";
      }
    });
    FAIL() << "the run should have failed";
  } catch (const RankFailure& f) {
    EXPECT_EQ(f.rank(), 1) << f.what();
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 5.0);  // the deadline is 10 s
  std::vector<int32_t> x(1000, 1);
  w.run([&](Communicator& c) { c.all_reduce(std::span<int32_t>(x), ReduceOp::kSum, Algo::kRing); });
}

// A lender that fails after lending withdraws the lend as its call unwinds, so that its
// caller may free the buffer at once: a receiver that comes for the message afterwards
// fails instead of reading freed memory (AddressSanitizer would catch a read).
TEST(Lend, ALenderThatFailsWithdrawsItsLendAndTheReceiverDoesNotReadIt) {
  World w(2, lend_everything());
  std::atomic<bool> unwound{false};
  bool receiver_threw = false;
  try {
    w.run([&](Communicator& c) {
      if (c.rank() == 0) {
        struct SetOnExit {  // destroyed after ~Exchange, which withdraws the lend
          std::atomic<bool>& flag;
          ~SetOnExit() { flag = true; }
        } set_on_exit{unwound};
        auto buf = std::make_unique<std::vector<int32_t>>(64, 5);
        Exchange ex(c, test_sig(buf->size()));
        ex.send_or_lend(1, 0, buf->data(), buf->size());
        throw std::runtime_error("rank 0 gives up after lending");
      }
      while (!unwound.load()) std::this_thread::sleep_for(milliseconds(1));
      Exchange ex(c, test_sig(64));
      try {
        Message m = ex.recv(0, 0, 64);
        ex.release(0, m);
      } catch (const AbortedError&) {
        receiver_threw = true;
        throw;
      }
    });
    FAIL() << "the run should have failed";
  } catch (const RankFailure& f) {
    EXPECT_EQ(f.rank(), 0) << f.what();
    EXPECT_NE(std::string(f.what()).find("rank 0 gives up after lending"), std::string::npos);
  }
  EXPECT_TRUE(receiver_threw);
  // The channel's counters square up: the next run lends and settles as usual.
  std::vector<int32_t> x(1000, 1);
  w.run([&](Communicator& c) { c.all_reduce(std::span<int32_t>(x), ReduceOp::kSum, Algo::kRing); });
}

// A receiver that never takes the message: the lender times out at its deadline and says
// whom it waited for and why.
TEST(Lend, ALendNeverReleasedTimesOutNamingTheReceiver) {
  World w(2, lend_everything(milliseconds(150)));
  try {
    w.run([&](Communicator& c) {
      std::vector<int32_t> buf(64, 5);
      if (c.rank() == 1) {
        std::this_thread::sleep_for(milliseconds(600));  // busy in its own code
        return;
      }
      Exchange ex(c, test_sig(buf.size()));
      ex.send_or_lend(1, 0, buf.data(), buf.size());
      ex.settle();
    });
    FAIL() << "the run should have failed";
  } catch (const RankFailure& f) {
    EXPECT_EQ(f.rank(), 0) << f.what();
    EXPECT_THROW(std::rethrow_exception(f.cause()), TimeoutError) << f.what();
    // The lender's own deadline or the watchdog's (whichever ticks first) names rank 1.
    const std::string what = f.what();
    EXPECT_TRUE(what.find("waiting for rank 1 to release a message lent to it") !=
                    std::string::npos ||
                what.find("lagging or missing rank(s): 1") != std::string::npos)
        << what;
  }
}

// Small payloads ride inside the mailbox slot; a received Message keeps its own copy
// through copies and assignments.
TEST(Lend, InlinePayloadsSurviveCopiesOfTheMessage) {
  World w(2);
  w.run([&](Communicator& c) {
    for (size_t len = 0; len <= 6; ++len) {
      std::vector<int32_t> v(len);
      std::iota(v.begin(), v.end(), int32_t(len));
      if (c.rank() == 0) {
        c.send(std::span<const int32_t>(v), 1);
      } else {
        std::vector<int32_t> got(len, 0);
        c.recv(std::span<int32_t>(got), 0);
        ASSERT_EQ(got, v) << "len " << len;
      }
    }
  });
  Message a;
  a.size = 3;
  a.local[0] = std::byte{1};
  a.local[2] = std::byte{3};
  a.data = a.local;
  Message b = a;
  Message c;
  c = b;
  a.local[0] = std::byte{9};
  EXPECT_EQ(b.data, b.local);
  EXPECT_EQ(c.data, c.local);
  EXPECT_EQ(c.data[0], std::byte{1});
  EXPECT_EQ(c.data[2], std::byte{3});
}

}  // namespace
}  // namespace dtsim::testing

namespace dtsim::testing {
namespace {

// all_reduce `shared` (every buffer lent writable, lend_shared) gives bitwise the same
// floats as `deterministic` (the rank-order sum) on every rank, at lengths N does not
// divide, with the same world reused; and with lends off (lend_bytes = SIZE_MAX) it runs
// `deterministic` itself.
TEST(Lend, SharedAllReduceEqualsTheRankOrderSumBitwise) {
  for (size_t lend_bytes : {size_t{1}, SIZE_MAX}) {
    for (int n : {1, 2, 3, 4, 8, 16}) {
      WorldOptions o = lend_everything();
      o.lend_bytes = lend_bytes;
      World w(n, o);
      for (size_t len : sweep_lengths(n)) {
        SCOPED_TRACE(describe_case(n, len, "all_reduce shared"));
        const Ranks<float> xs = float_data<float>(n, len, 7 * n + len);
        for (int round = 0; round < 2; ++round) {
          Ranks<float> shared = xs, ordered = xs;
          w.run([&](Communicator& c) {
            c.all_reduce(std::span<float>(shared[c.rank()]), ReduceOp::kSum, Algo::kShared);
            c.all_reduce(std::span<float>(ordered[c.rank()]), ReduceOp::kSum, Algo::kDeterministic);
          });
          for (int r = 0; r < n; ++r) {
            ASSERT_TRUE(bitwise_equal(Ranks<float>{shared[r]}, Ranks<float>{ordered[0]}))
                << "rank " << r << " round " << round;
          }
        }
      }
    }
  }
}

// The same where the ranks' buffers sit at different alignments (rank r's starts r mod 8
// floats into its allocation), so that the vector strips of reduce_all line up with some
// buffers and straddle cache lines in others, and the ranks peel different heads: still
// bitwise the rank-order sum, and nothing outside the buffers is written.
TEST(Lend, SharedAllReduceAtMixedAlignmentsEqualsTheRankOrderSumBitwise) {
  for (int n : {2, 3, 4, 8, 16}) {
    World w(n, lend_everything());
    for (size_t len : {size_t{1}, size_t{33}, size_t{1000}, size_t{4099}, kLargeOdd}) {
      SCOPED_TRACE(describe_case(n, len, "all_reduce shared, mixed alignment"));
      const Ranks<float> xs = float_data<float>(n, len, 11 * n + len);
      Ranks<float> shared(n), ordered = xs;
      for (int r = 0; r < n; ++r) {
        shared[r].assign(len + 16, -1.0f);
        std::copy(xs[r].begin(), xs[r].end(), shared[r].begin() + r % 8);
      }
      w.run([&](Communicator& c) {
        const int r = c.rank();
        c.all_reduce(std::span<float>(shared[r].data() + r % 8, len), ReduceOp::kSum,
                     Algo::kShared);
        c.all_reduce(std::span<float>(ordered[r]), ReduceOp::kSum, Algo::kDeterministic);
      });
      for (int r = 0; r < n; ++r) {
        const std::vector<float> mine(shared[r].begin() + r % 8, shared[r].begin() + r % 8 + len);
        ASSERT_TRUE(bitwise_equal(Ranks<float>{mine}, Ranks<float>{ordered[0]})) << "rank " << r;
        for (size_t i = 0; i < shared[r].size(); ++i) {
          if (i < size_t(r % 8) || i >= r % 8 + len) {
            ASSERT_EQ(shared[r][i], -1.0f) << "rank " << r << " wrote outside at " << i;
          }
        }
      }
    }
  }
}

// lend_shared hands the receiver the lender's own bytes, writable, and the lender sees
// the receiver's writes once settle() returns; a plain lend stays read-only.
TEST(Lend, ASharedLendIsWritableAndTheLenderSeesTheWritesAfterSettle) {
  World w(2, lend_everything());
  std::vector<int32_t> seen;
  bool plain_read_only = false, shared_writable = false;
  w.run([&](Communicator& c) {
    std::vector<int32_t> buf(64, 5);
    Exchange ex(c, test_sig(buf.size()));
    if (c.rank() == 0) {
      ex.send_or_lend(1, 0, buf.data(), buf.size());
      ex.lend_shared(1, 1, buf.data(), buf.size());
      ex.settle();
      seen = buf;
    } else {
      Message plain = ex.recv(0, 0, buf.size());
      plain_read_only = plain.lent && !plain.writable;
      ex.release(0, plain);
      Message m = ex.recv(0, 1, buf.size());
      shared_writable = m.lent && m.writable;
      if (m.writable) {
        for (size_t i = 0; i < buf.size(); ++i) reinterpret_cast<int32_t*>(m.data)[i] = int32_t(i);
      }
      ex.release(0, m);
    }
  });
  EXPECT_TRUE(plain_read_only);
  EXPECT_TRUE(shared_writable);
  ASSERT_EQ(seen.size(), 64u);
  for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], int32_t(i));
}

// A rank that fails before it joins a shared all_reduce leaves the others an error, not a
// hang, long before the deadline: they withdraw their lends, or fail waiting for its lend
// as the world aborts. The world runs again afterwards.
TEST(Lend, ARankThatFailsBeforeASharedAllReduceDoesNotHangTheOthers) {
  for (int n : {2, 3, 4, 8}) {
    World w(n, lend_everything());
    const auto t0 = std::chrono::steady_clock::now();
    try {
      w.run([&](Communicator& c) {
        std::vector<float> x(1000, 1.0f);
        if (c.rank() == n - 1) throw std::runtime_error("the last rank fails");
        c.all_reduce(std::span<float>(x), ReduceOp::kSum, Algo::kShared);
      });
      FAIL() << "the run should have failed";
    } catch (const RankFailure& f) {
      EXPECT_EQ(f.rank(), n - 1) << f.what();
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(s, 5.0) << "N=" << n;  // the deadline is 10 s
    std::vector<std::vector<float>> xs(n, std::vector<float>(1000, 1.0f));
    w.run([&](Communicator& c) {
      c.all_reduce(std::span<float>(xs[c.rank()]), ReduceOp::kSum, Algo::kShared);
    });
    for (int r = 0; r < n; ++r) EXPECT_EQ(xs[r][999], float(n)) << "N=" << n;
  }
}

}  // namespace
}  // namespace dtsim::testing
