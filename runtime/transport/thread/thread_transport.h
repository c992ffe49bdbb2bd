// The in-process transport: ranks are threads of one World and exchange messages through
// lock-free SPSC mailboxes (mailbox.h, mail_ring.h). A send copies the payload (into the
// mailbox slot itself up to kInlineBytes, else into a pooled buffer), so the receiver sees
// the bytes as they were at send time (the lesson's "all sends of a step happen at once").
// A lend skips the copy: the receiver reads the sender's buffer, and the sender's settle()
// waits for the release before the buffer may change. No allocation, lock or log per
// message once the pools are warm.
//
// Thread safety: one ThreadTransport per rank, used only by that rank's thread.
//
// Subclassed only by test code that plants a bug (runtime/mutants/, planted.h) through the
// protected seams below; the release runtime uses this class as it is.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "runtime/controller.h"
#include "runtime/transport/thread/thread_shared.h"
#include "runtime/transport/transport.h"

namespace dtsim {

class ThreadTransport : public Transport {
 public:
  ThreadTransport(ThreadShared* state, int rank);

  int rank() const override { return rank_; }
  int size() const override { return state_->size(); }
  void send(int dst, const MessageKey& key, const Signature& sig,
            std::span<const std::byte> payload, const WaitSite& site) override;
  Message recv(int src, const MessageKey& key, const WaitSite& site) override;
  void release(int src, Message& msg) override;
  void lend(int dst, const MessageKey& key, const Signature& sig,
            std::span<const std::byte> payload, const WaitSite& site) override;
  void settle(int dst, const WaitSite& site, bool unwinding) override;
  bool shares_memory(int) const override { return true; }
  void lend_shared(int dst, const MessageKey& key, const Signature& sig,
                   std::span<std::byte> payload, const WaitSite& site) override;

 protected:
  // Seams for a planted bug. recv() calls take_first before its own search when
  // takes_first_ is set (one branch per message otherwise); true if it took `out`.
  virtual bool take_first(Channel&, int, const MessageKey&, const WaitSite&, Envelope*) {
    return false;
  }
  // Receiver: claims lent message `e` before reading it; throws (refuse_lend) if its sender
  // withdrew it. Once per lent message.
  virtual void claim_lend(Channel& ch, const Envelope& e, int src, const WaitSite& site);
  [[noreturn]] void refuse_lend(int src, const WaitSite& site);
  // Keeps `e` from `src` in this rank's stash; MismatchError if its key is already there.
  void stash_or_fail(int src, const Envelope& e, const WaitSite& site);
  // Throws MismatchError if `e` belongs to this collective but carries another fingerprint
  // (and frees its payload).
  void check_fingerprint(const Envelope& e, int src, const MessageKey& key, const WaitSite& site);

  ThreadShared* state_;
  int rank_;
  schedule::Controller* sched_;  // WorldOptions::scheduler: nullptr unless controlled
  bool takes_first_ = false;

 private:
  // lend() and lend_shared(): `kind` says whether the receiver may write.
  void lend_as(PayloadKind kind, int dst, const MessageKey& key, const Signature& sig,
               std::span<const std::byte> payload, const WaitSite& site);
  bool try_take(Channel& ch, int src, const MessageKey& key, const WaitSite& site, Envelope* out);
  void wait_for_space(Channel& ch, const Envelope& e, int dst, const WaitSite& site);
  // Pushes `e` (waiting for space if the mailbox is full) and wakes dst: the end of a
  // send and of a lend.
  void deliver(Channel& ch, const Envelope& e, int dst, const WaitSite& site);
  // Waits until `bytes` more large-payload bytes fit the channel's budget, then takes them.
  void reserve_bytes(Channel& ch, size_t bytes, int dst, const WaitSite& site);
  // Frees an envelope that will not be delivered and returns its budget: the receiver's
  // thread drops one from rank `src`; src < 0: the sending thread drops one it never pushed.
  void drop(Channel& ch, const Envelope& e, int src);
  // Lending (lend.cc). Receiver: claim_lend (above) before reading a lent message,
  // finish_lend after; drop_lend for one it will not read. Sender: withdraw_lends when it
  // gives up on dst, then wait only for claims in progress.
  void finish_lend(Channel& ch, int src);
  void drop_lend(Channel& ch, const Envelope& e, int src);
  void withdraw_lends(Channel& ch, int dst);
  bool peer_gone(int peer) const;
  // Polls `ready` with backoff until it holds. TimeoutError at the deadline ("timed out
  // after 1.0 s <why>"), or at once if `dst` (when >= 0) has returned from its job.
  // `can`: a side-effect-free test that `ready` may now succeed; with it, under the
  // controlled scheduler the sender blocks there instead of polling.
  void wait_as_sender(const std::function<bool()>& ready, int dst, const WaitSite& site,
                      const std::string& why, const std::function<bool()>* can = nullptr);
  // A pooled buffer of at least `size` bytes for a send to `dst`: from the channel's cache,
  // or newly allocated within the world-wide budget (waiting for room, flow control).
  PayloadBuffer take_buffer(Channel& ch, size_t size, int dst, const WaitSite& site);
  // A line for a receiver's timeout when some rank waits for the world-wide budget, else "".
  std::string budget_note() const;
  // MismatchError for a message of a collective this rank has already finished.
  [[noreturn]] void fail_stale(const Envelope& e, int src, const WaitSite& site);
  void check_abort(const WaitSite& site, int peer);
  enum class PeerCheck { kWaiting, kArrived, kReturned };
  // While blocked on `src`: kArrived if the message came meanwhile, kReturned if src
  // returned from its job without sending it; throws MismatchError if src is in this
  // collective (same communicator and sequence number) with a different fingerprint.
  PeerCheck check_peer(Channel& ch, int src, const MessageKey& key, const WaitSite& site,
                       Envelope* out);
  void jitter();
  // Under the controlled scheduler (controlled_waits.cc) the waits block
  // in the scheduler instead of polling: recv's for a message, settle's for releases,
  // withdraw's for readers, a sender's for room.
  bool recv_controlled(Channel& ch, int src, const MessageKey& key, const WaitSite& site,
                       Envelope* out);
  void settle_controlled(Channel& ch, int dst, const WaitSite& site);
  void block(schedule::WaitKind kind, int peer, const WaitSite* site,
             const std::function<bool()>& ready);
  // A sender's wait for room (dst >= 0) or for the world-wide budget (dst < 0).
  void block_sender(int dst, const WaitSite& site, const std::function<bool()>& can);
  // Frees every rank's cached buffers (only while this rank alone runs).
  void reclaim_controlled();

  int spin_;
  uint64_t rng_;
};

}  // namespace dtsim
