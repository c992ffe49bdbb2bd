// The transport: how one rank hands bytes to another. The communicator and the collective
// algorithms talk only to this interface, so a process backend (MPI, sockets) can replace
// the in-process mailboxes without touching them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "runtime/types.h"

namespace dtsim {

// Identifies one message: the communicator, the collective's sequence number on it, and
// a tag the algorithm chooses (usually the step). Receivers match on (source, key).
// Collective keys have seq < 2^63. Point-to-point keys (communicator.cc) set bit 63 of
// seq, with the user's tag (0..2^31-1, checked) in bits 32-62 and the message's number
// on that (peer, tag) in bits 0-31; their `tag` field is the sender's local rank.
struct MessageKey {
  uint64_t comm = 0;
  uint64_t seq = 0;
  uint32_t tag = 0;
  friend bool operator==(const MessageKey&, const MessageKey&) = default;
};

// What the sending rank was calling when it sent: the collective fingerprint that lets a
// receiver detect mismatched collectives (op, root, reduce op, element type and count).
struct Signature {
  OpKind op = OpKind::kSend;
  DType dtype = DType::kByte;
  ReduceOp reduce = ReduceOp::kSum;
  Algo algo = Algo::kAuto;  // resolved algorithm: ranks must agree on it too
  int32_t root = -1;
  uint64_t count = 0;
  friend bool operator==(const Signature&, const Signature&) = default;
};

// "all_reduce(numel=1024, op=sum)", "broadcast(numel=8, root=0)": for error messages.
std::string describe(const Signature& sig);

// Where a blocked rank is, for error messages (timeouts, mismatches, aborts).
struct WaitSite {
  const char* comm_name = "";
  uint64_t seq = 0;
  Signature sig;
};

// A received message: the receiver may read `data`, and modify it unless `lent`, until it
// calls release().
// A transport may carry a small payload in the message itself (`local`); copies and moves
// keep `data` pointing at their own copy of it.
struct Message {
  static constexpr size_t kLocalBytes = 16;
  std::byte* data = nullptr;
  size_t size = 0;
  Signature sig;
  void* buffer = nullptr;  // transport-private handle
  size_t capacity = 0;     // transport-private
  bool lent = false;       // sent with lend() or lend_shared(): the sender's own bytes
  bool writable = false;   // lend_shared() in shared memory: the receiver may write them too
  alignas(8) std::byte local[kLocalBytes] = {};

  Message() = default;
  Message(const Message& o) { *this = o; }
  Message& operator=(const Message& o) {
    if (this == &o) return *this;
    size = o.size;
    sig = o.sig;
    buffer = o.buffer;
    capacity = o.capacity;
    lent = o.lent;
    writable = o.writable;
    std::memcpy(local, o.local, kLocalBytes);
    data = o.data == o.local ? local : o.data;
    return *this;
  }
};

// The properties every transport gives (the in-process one in thread_transport.h; a
// process backend must give the same, and the tests run over each):
//   - send() and lend() to oneself never block on a bound: a rank may send to itself any
//     number of messages before it receives them.
//   - A wait (recv, room to send, settle) throws TimeoutError after WorldOptions::timeout
//     without progress, saturating (milliseconds::max() waits forever); a sender or
//     receiver whose peer has returned from its job gives up long before that.
//   - recv throws MismatchError when `src` sent a different call at the same sequence
//     number, or a message for a sequence number of the same communicator that this
//     rank has already finished (a call skipped or changed by a rank that only sends).
//   - Payload copies in flight count against a world-wide budget
//     (WorldOptions::max_bytes_in_flight): flow control while it can progress, an error
//     naming the budget when it cannot.
//   - After a run, the World asks what was left unreceived and fails the run naming
//     both ranks and both calls (TransportDomain::undelivered_report, plugin.h).
//
// Thread safety: one Transport per rank, used only by that rank's thread.
class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Sends a snapshot of `payload` to global rank `dst`: when this returns, the caller may
  // change its buffer and the receiver still sees the bytes as they were at the call.
  virtual void send(int dst, const MessageKey& key, const Signature& sig,
                    std::span<const std::byte> payload, const WaitSite& site) = 0;
  // Blocks until the message `key` from global rank `src` arrives. Throws TimeoutError
  // past the deadline, AbortedError when another rank failed, MismatchError when `src`
  // sent a different collective at the same sequence number.
  virtual Message recv(int src, const MessageKey& key, const WaitSite& site) = 0;
  // Returns a received message's storage to the transport for reuse.
  virtual void release(int src, Message& msg) = 0;
  // Sends `payload` without copying it, like a nonblocking MPI_Isend: the receiver reads
  // the caller's bytes in place (read-only: Message::lent). The caller must leave them
  // unchanged, and alive, until settle(dst) returns.
  virtual void lend(int dst, const MessageKey& key, const Signature& sig,
                    std::span<const std::byte> payload, const WaitSite& site) = 0;
  // Blocks until `dst` has released every message this rank lent it (MPI_Wait). Past the
  // deadline, or when another rank failed, it withdraws the lends (a receiver that has not
  // yet taken one fails instead of reading it), waits for reads in progress, and throws
  // TimeoutError or AbortedError. With `unwinding` (a destructor after a failure) it
  // withdraws at once and returns. Either way, when it returns or throws, no one reads
  // the lent bytes any more.
  virtual void settle(int dst, const WaitSite& site, bool unwinding) = 0;
  // Whether this rank and global rank `peer` share memory, so that lend_shared() to it
  // hands over this rank's own bytes. Both ranks of a pair get the same answer.
  virtual bool shares_memory(int peer) const {
    (void)peer;
    return false;
  }
  // lend() whose receiver may also write the bytes in place (Message::writable) until it
  // releases them; this rank sees its writes once settle(dst) returns. Until then the
  // caller and the receiver must not touch the same bytes where either writes them (the
  // algorithm splits them; the stress tests check it). Without shared memory it is lend()
  // (a transport may copy): Message::writable is false, and writes reach no one.
  virtual void lend_shared(int dst, const MessageKey& key, const Signature& sig,
                           std::span<std::byte> payload, const WaitSite& site) {
    lend(dst, key, sig, payload, site);
  }
};

}  // namespace dtsim
