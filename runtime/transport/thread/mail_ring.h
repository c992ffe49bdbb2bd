// The mailbox queue: a bounded single-producer/single-consumer ring of message envelopes,
// one 64-byte cache line per slot, each slot carrying its own turn (the sequence of
// Vyukov's bounded queue). The producer writes position p into slot p mod Depth and
// publishes turn = p + 1; the consumer at p polls that slot's turn, copies the slot out
// and publishes its position on a line of its own, which the producer reads only when
// its last reading says the ring is full. Only the producer writes a slot.
//
// Why not boost::lockfree::spsc_queue (which the buffer-return queue still uses): there,
// every push reads the consumer's index and every pop the producer's, and an 80-byte
// envelope straddles two lines, so one small message moved about five cache lines between
// the two cores. Here it moves one, the slot, and a payload of up to kInlineBytes rides
// inside it. bench/bench_mailbox measures the difference (README, "Dependencies").
//
// Thread safety: push() from one producer thread, pop()/ready() from one consumer thread;
// consume_all() only when neither runs (between jobs).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "runtime/transport/transport.h"

namespace dtsim {

// How a message's payload travels.
enum class PayloadKind : uint8_t {
  kInline,      // in the envelope itself (size <= kInlineBytes)
  kPooled,      // in a pooled buffer the receiver hands back through Channel::free
  kBorrowed,    // points into the sender's live buffer (unsafe test mode only)
  kLent,        // points into the sender's buffer, which waits for the release (lend())
  kLentShared,  // the same, and the receiver may write it (lend_shared())
};

inline bool is_lent(PayloadKind k) {
  return k == PayloadKind::kLent || k == PayloadKind::kLentShared;
}

inline constexpr size_t kInlineBytes = 16;

// A message: its key, the sender's fingerprint and the payload (or where it is).
struct Envelope {
  MessageKey key;
  Signature sig;
  size_t size = 0;
  PayloadKind kind = PayloadKind::kInline;
  union {
    struct {
      std::byte* data;
      size_t capacity;
    } buf;
    std::byte bytes[kInlineBytes];
  } payload{};
  std::byte* data() { return kind == PayloadKind::kInline ? payload.bytes : payload.buf.data; }
};

template <uint32_t Depth>
class MailRing {
  static_assert(Depth >= 2 && (Depth & (Depth - 1)) == 0, "Depth must be a power of two");

 public:
  MailRing() = default;
  MailRing(const MailRing&) = delete;
  MailRing& operator=(const MailRing&) = delete;

  // Producer. False when the ring is full (the consumer is Depth messages behind).
  bool push(const Envelope& e) {
    if (head_ - tail_seen_ >= Depth) {
      tail_seen_ = tail_.load(std::memory_order_acquire);
      if (head_ - tail_seen_ >= Depth) return false;
    }
    Slot& s = slots_[head_ & (Depth - 1)];
    s.comm = e.key.comm;
    s.seq = e.key.seq;
    s.tag = e.key.tag;
    s.sig = e.sig;
    s.size_kind = e.size | uint64_t(e.kind) << kKindShift;
    s.payload = e.payload;
    s.turn.store(head_ + 1, std::memory_order_release);
    ++head_;
    return true;
  }

  // Producer: would push() succeed now?
  bool has_room() const { return head_ - tail_.load(std::memory_order_acquire) < Depth; }

  // Consumer. False when no message is waiting.
  bool pop(Envelope& out) {
    const Slot& s = slots_[tail_local_ & (Depth - 1)];
    if (s.turn.load(std::memory_order_acquire) != tail_local_ + 1) return false;
    out.key = MessageKey{s.comm, s.seq, s.tag};
    out.sig = s.sig;
    out.size = s.size_kind & ((uint64_t{1} << kKindShift) - 1);
    out.kind = static_cast<PayloadKind>(s.size_kind >> kKindShift);
    out.payload = s.payload;
    tail_.store(++tail_local_, std::memory_order_release);
    return true;
  }

  // Consumer, or anyone between jobs: the next message, left in place. False if none.
  bool peek(Envelope& out) const {
    const Slot& s = slots_[tail_local_ & (Depth - 1)];
    if (s.turn.load(std::memory_order_acquire) != tail_local_ + 1) return false;
    out.key = MessageKey{s.comm, s.seq, s.tag};
    out.sig = s.sig;
    out.size = s.size_kind & ((uint64_t{1} << kKindShift) - 1);
    out.kind = static_cast<PayloadKind>(s.size_kind >> kKindShift);
    out.payload = s.payload;
    return true;
  }

  // Consumer: is a message waiting?
  bool ready() const {
    return slots_[tail_local_ & (Depth - 1)].turn.load(std::memory_order_acquire) ==
           tail_local_ + 1;
  }

  template <class F>
  void consume_all(F&& f) {
    Envelope e;
    while (pop(e)) f(e);
  }

 private:
  // Written by the producer only; the consumer only reads it, so the next lap's write
  // finds the line shared, not modified in the other core's cache.
  struct alignas(64) Slot {
    std::atomic<uint32_t> turn{0};  // position + 1 once the slot holds that position
    uint32_t tag = 0;
    uint64_t comm = 0;
    uint64_t seq = 0;
    Signature sig;
    uint64_t size_kind = 0;  // size, with the PayloadKind in the top three bits
    decltype(Envelope::payload) payload{};
  };
  static_assert(sizeof(Slot) == 64, "one cache line per message");
  static constexpr int kKindShift = 61;

  Slot slots_[Depth];
  alignas(64) uint32_t head_ = 0;              // producer: next position to write
  uint32_t tail_seen_ = 0;                     // producer: the consumer's position, as last read
  alignas(64) uint32_t tail_local_ = 0;        // consumer: next position to read
  alignas(64) std::atomic<uint32_t> tail_{0};  // consumer's position, for a full producer
};

}  // namespace dtsim
