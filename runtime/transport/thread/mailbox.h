// The in-process transport's storage: one mailbox channel per ordered pair of ranks.
//
// Thread safety: a Channel (src -> dst) has exactly one producer of `mail` (src's thread)
// and one consumer (dst's thread), and the reverse for `free`, through which dst hands
// payload buffers back to src for reuse. Messages that arrive ahead of the one a rank
// waits for wait in that rank's Stash (stash.h).
// Memory: a Channel is about 3.5 KiB and there are N^2 of them; pooled payload buffers
// (in flight, stashed, or cached in `free`) count against the world-wide budget
// (WorldOptions::max_bytes_in_flight), and every run returns the cached ones.
#pragma once

#include <atomic>
#include <boost/lockfree/spsc_queue.hpp>
#include <cstddef>
#include <cstdint>

#include "runtime/payload.h"
#include "runtime/transport/thread/mail_ring.h"
#include "runtime/transport/transport.h"

namespace dtsim {

inline constexpr uint32_t kMailboxDepth = 32;
// Payloads of at least kLargeMessageBytes count against a per-channel budget, so a rank
// that runs ahead (a broadcast root, the sender of a direct algorithm) parks at most
// kChannelByteBudget in one mailbox (or one message, if that is larger) instead of
// kMailboxDepth copies of its largest message. Smaller messages skip the accounting.
inline constexpr size_t kLargeMessageBytes = size_t{64} << 10;
inline constexpr size_t kChannelByteBudget = size_t{32} << 20;

struct Channel {
  MailRing<kMailboxDepth> mail;
  boost::lockfree::spsc_queue<PayloadBuffer, boost::lockfree::capacity<2 * kMailboxDepth>> free;
  // Bytes of large payloads sent and not yet released: the sender adds, the receiver
  // subtracts on release. Its own cache line: it is touched only for large messages.
  alignas(64) std::atomic<size_t> large_bytes{0};
  // Lending (Transport::lend, lend.cc). The sender numbers its lends 1, 2, ...; the
  // receiver claims one before it reads it and releases it after. A sender that gives up
  // (deadline, abort, an exception) withdraws every lend so far and waits only for claims
  // in progress; a receiver that then tries to claim a withdrawn lend fails instead of
  // reading. lends_released + lends_written_off == lends_sent: no one reads the bytes.
  // Receiver-written:
  alignas(64) std::atomic<uint64_t> lends_released{0};
  std::atomic<uint32_t> lends_reading{0};  // claimed, not yet released
  // Sender-written:
  alignas(64) std::atomic<uint64_t> lends_withdrawn{0};  // lends numbered up to this
  uint64_t lends_sent = 0;
  uint64_t lends_written_off = 0;  // withdrawn before anyone claimed them
};

}  // namespace dtsim
