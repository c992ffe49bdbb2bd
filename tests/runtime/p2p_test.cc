// Point to point: send/recv match in order per (peer, tag), tags may be received out of
// order, a send is a snapshot of the buffer at the call, and more messages than a
// mailbox holds still get through when the receiver asks for them in another order.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "runtime_test_util.h"

namespace dtsim::testing {
namespace {

TEST(P2pTest, TagsReceivedOutOfOrderMatchByTagThenInOrder) {
  TestWorld w(2);
  w.run([](Communicator& c) {
    if (c.rank() == 0) {
      for (int32_t x : {10, 11}) c.send(std::span<const int32_t>(&x, 1), 1, 1);
      for (int32_t x : {20, 21}) c.send(std::span<const int32_t>(&x, 1), 1, 2);
      int32_t x = 30;
      c.send(std::span<const int32_t>(&x, 1), 1, 3);
    } else {
      int32_t x = 0;
      c.recv(std::span<int32_t>(&x, 1), 0, 3);
      EXPECT_EQ(x, 30);
      c.recv(std::span<int32_t>(&x, 1), 0, 2);
      EXPECT_EQ(x, 20);
      c.recv(std::span<int32_t>(&x, 1), 0, 1);
      EXPECT_EQ(x, 10);
      c.recv(std::span<int32_t>(&x, 1), 0, 2);
      EXPECT_EQ(x, 21);
      c.recv(std::span<int32_t>(&x, 1), 0, 1);
      EXPECT_EQ(x, 11);
    }
  });
}

TEST(P2pTest, MoreMessagesThanAMailboxHoldsReceivedInReverseTagOrder) {
  constexpr int kMsgs = 200;
  TestWorld w(2);
  w.run([](Communicator& c) {
    if (c.rank() == 0) {
      for (int tag = 0; tag < 4; ++tag) {
        for (int i = 0; i < kMsgs; ++i) {
          const std::vector<int64_t> v(1 + i % 5, tag * 1000 + i);
          c.send(std::span<const int64_t>(v), 1, tag);
        }
      }
    } else {
      for (int tag = 3; tag >= 0; --tag) {
        for (int i = 0; i < kMsgs; ++i) {
          std::vector<int64_t> v(1 + i % 5, -1);
          c.recv(std::span<int64_t>(v), 0, tag);
          for (int64_t x : v) ASSERT_EQ(x, tag * 1000 + i) << "tag " << tag << " msg " << i;
        }
      }
    }
  });
}

TEST(P2pTest, ASendIsASnapshotOfTheBufferAtTheCall) {
  TestWorld w(2);
  w.run([](Communicator& c) {
    std::vector<float> v(64);
    if (c.rank() == 0) {
      for (int i = 0; i < 10; ++i) {
        std::fill(v.begin(), v.end(), static_cast<float>(i));
        c.send(std::span<const float>(v), 1);
      }
      std::fill(v.begin(), v.end(), -1.0f);  // after the sends: must not be seen
      c.barrier();
    } else {
      c.barrier();  // every send happened (and the sender overwrote its buffer) before
      for (int i = 0; i < 10; ++i) {
        c.recv(std::span<float>(v), 0);
        for (float x : v) ASSERT_EQ(x, static_cast<float>(i));
      }
    }
  });
}

TEST(P2pTest, RingPassAroundSixteenRanks) {
  constexpr int n = 16;
  TestWorld w(n);
  w.run([](Communicator& c) {
    const int right = (c.rank() + 1) % n, left = (c.rank() + n - 1) % n;
    std::vector<int32_t> token(33, c.rank());
    for (int hop = 0; hop < n; ++hop) {
      c.send(std::span<const int32_t>(token), right, hop);
      c.recv(std::span<int32_t>(token), left, hop);
    }
    for (int32_t x : token) EXPECT_EQ(x, c.rank());  // n hops bring every token home
  });
}

TEST(P2pTest, ZeroLengthMessagesAndSelfPeersAreHandled) {
  TestWorld w(3);
  w.run([](Communicator& c) {
    std::vector<float> empty;
    const int right = (c.rank() + 1) % 3, left = (c.rank() + 2) % 3;
    c.send(std::span<const float>(empty), right, 9);
    c.recv(std::span<float>(empty), left, 9);
  });
}

TEST(P2pTest, SizeMismatchAndBadPeerAreUsageErrors) {
  TestWorld w(2);
  try {
    w.run([](Communicator& c) {
      std::vector<float> v(c.rank() == 0 ? 4 : 5);
      if (c.rank() == 0) {
        c.send(std::span<const float>(v), 1);
      } else {
        c.recv(std::span<float>(v), 0);
      }
    });
    ADD_FAILURE() << "a 4-element send matched a 5-element recv";
  } catch (const RankFailure& f) {
    EXPECT_EQ(f.rank(), 1);
    EXPECT_THROW(std::rethrow_exception(f.cause()), UsageError) << f.what();
  }
  try {
    w.run([](Communicator& c) {
      std::vector<float> v(4);
      if (c.rank() == 0) c.send(std::span<const float>(v), 2);
    });
    ADD_FAILURE() << "send to rank 2 of 2 was accepted";
  } catch (const RankFailure& f) {
    EXPECT_THROW(std::rethrow_exception(f.cause()), UsageError) << f.what();
  }
}

TEST(P2pTest, AnUnmatchedSendFailsItsRunAndDoesNotLeakIntoTheNextRun) {
  TestWorld w(2);
  try {
    w.run([](Communicator& c) {
      const int32_t stale = 111;
      if (c.rank() == 0) c.send(std::span<const int32_t>(&stale, 1), 1, 4);  // never received
    });
    ADD_FAILURE() << "a send that no one received passed unnoticed";
  } catch (const RankFailure& f) {
    EXPECT_EQ(f.rank(), 1);
    EXPECT_NE(std::string(f.what()).find("rank 0 sent send(numel=1"), std::string::npos)
        << f.what();
    EXPECT_NE(std::string(f.what()).find("on tag 4 (its message 0 on that tag) to rank 1, which "
                                         "never called the matching recv"),
              std::string::npos)
        << f.what();
  }
  w.run([](Communicator& c) {
    int32_t x = 222;
    if (c.rank() == 0) {
      c.send(std::span<const int32_t>(&x, 1), 1, 4);
    } else {
      c.recv(std::span<int32_t>(&x, 1), 0, 4);
      EXPECT_EQ(x, 222);
    }
  });
}

TEST(P2pTest, ASendIntoAFullMailboxTimesOutNamingTheReceiver) {
  WorldOptions o;
  o.timeout = std::chrono::milliseconds(150);
  TestWorld w(2, o);
  try {
    w.run([](Communicator& c) {
      if (c.rank() == 1) {  // stuck: never receives
        std::this_thread::sleep_for(std::chrono::milliseconds(400));
        return;
      }
      const int32_t x = 1;
      for (int i = 0; i < 1000; ++i) c.send(std::span<const int32_t>(&x, 1), 1);
    });
    ADD_FAILURE() << "1000 sends to a rank that never receives all succeeded";
  } catch (const RankFailure& f) {
    EXPECT_EQ(f.rank(), 0);
    EXPECT_THROW(std::rethrow_exception(f.cause()), TimeoutError) << f.what();
    EXPECT_NE(std::string(f.what()).find("sending to rank 1"), std::string::npos) << f.what();
  }
}

TEST(P2pTest, PointToPointAndCollectivesInterleave) {
  TestWorld w(4);
  w.run([](Communicator& c) {
    const int peer = c.rank() ^ 1;
    for (int i = 0; i < 50; ++i) {
      std::vector<int64_t> mine(3, c.rank() * 100 + i), theirs(3);
      c.send(std::span<const int64_t>(mine), peer, i % 3);
      std::vector<int64_t> v(i + 1, c.rank());
      c.all_reduce(std::span<int64_t>(v));
      c.recv(std::span<int64_t>(theirs), peer, i % 3);
      ASSERT_EQ(theirs[0], peer * 100 + i);
      ASSERT_EQ(v[i], 6);
    }
  });
}

}  // namespace
}  // namespace dtsim::testing

namespace dtsim::testing {
namespace {

// Large messages count against a per-channel byte budget: a sender that runs ahead parks at
// most kChannelByteBudget (32 MiB) in one mailbox, not kMailboxDepth (32) copies of its
// largest message. Rank 0 sends 24 messages of 4 MiB while rank 1 waits before receiving;
// without the budget the mailbox depth alone would let all 24 through (96 MiB parked).
TEST(P2pTest, LargeMessagesAreBoundedByBytesInFlight) {
  constexpr size_t kCount = 24;
  constexpr size_t kElems = (size_t{4} << 20) / sizeof(float);
  TestWorld w(2);
  std::atomic<int> sent{0};
  int sent_while_receiver_waited = -1;
  w.run([&](Communicator& c) {
    std::vector<float> buf(kElems);
    if (c.rank() == 0) {
      for (size_t i = 0; i < kCount; ++i) {
        std::fill(buf.begin(), buf.end(), static_cast<float>(i));
        c.send(std::span<const float>(buf), 1);
        sent.fetch_add(1);
      }
    } else {
      // Wait (not a fixed sleep: under a sanitizer on a loaded machine eight 4 MiB sends
      // can take longer) until the budget's worth has gone out, then give the sender time
      // to overrun it if it could.
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (sent.load() < 8 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      sent_while_receiver_waited = sent.load();
      for (size_t i = 0; i < kCount; ++i) {
        c.recv(std::span<float>(buf), 0);
        ASSERT_EQ(buf.front(), static_cast<float>(i));
        ASSERT_EQ(buf.back(), static_cast<float>(i));
      }
    }
  });
  EXPECT_EQ(sent_while_receiver_waited, 8);  // 32 MiB / 4 MiB
}

}  // namespace
}  // namespace dtsim::testing
