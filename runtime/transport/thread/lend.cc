// Lending: a message whose payload stays in the sender's buffer (Transport::lend, and
// lend_shared, whose receiver may also write it: PayloadKind::kLentShared), the
// sender's wait for its release (settle) and the withdrawal that keeps a sender that gives
// up from returning while a receiver could still read its bytes.
//
// The race that matters is between a receiver claiming lend k and the sender withdrawing
// it. Both sides announce, then look (seq_cst on both): the receiver increments
// lends_reading, then checks lends_withdrawn; the sender raises lends_withdrawn, then waits
// for lends_reading to drop to zero. At least one sees the other, so either the receiver
// reads and the sender waits for it to finish, or the receiver refuses to read.
#include <algorithm>
#include <string>

#include "runtime/transport/thread/thread_transport.h"
#include "runtime/transport/transport_wait.h"

namespace dtsim {

void ThreadTransport::lend(int dst, const MessageKey& key, const Signature& sig,
                           std::span<const std::byte> payload, const WaitSite& site) {
  lend_as(PayloadKind::kLent, dst, key, sig, payload, site);
}

void ThreadTransport::lend_shared(int dst, const MessageKey& key, const Signature& sig,
                                  std::span<std::byte> payload, const WaitSite& site) {
  lend_as(PayloadKind::kLentShared, dst, key, sig, payload, site);
}

void ThreadTransport::lend_as(PayloadKind kind, int dst, const MessageKey& key,
                              const Signature& sig, std::span<const std::byte> payload,
                              const WaitSite& site) {
  if (dst == rank_) {  // nothing to save, and settle() would wait on this very thread
    send(dst, key, sig, payload, site);
    return;
  }
  jitter();
  if (sched_) sched_->yield(rank_, schedule::Point::kLend);
  check_abort(site, dst);
  Channel& ch = state_->channel(rank_, dst);
  Envelope e;
  e.key = key;
  e.sig = sig;
  e.size = payload.size();
  e.kind = kind;
  // A lent payload needs no capacity: that field carries the lend's number instead.
  e.payload.buf = {const_cast<std::byte*>(payload.data()), ++ch.lends_sent};
  deliver(ch, e, dst, site);
}

namespace {

// Receiver: announces a read of lend `number`, then looks whether the sender withdrew it
// (the receiver's half of the handshake above). On false nothing is claimed.
bool try_claim(Channel& ch, uint64_t number) {
  ch.lends_reading.fetch_add(1, std::memory_order_seq_cst);
  if (ch.lends_withdrawn.load(std::memory_order_seq_cst) < number) return true;
  ch.lends_reading.fetch_sub(1, std::memory_order_release);
  return false;
}

}  // namespace

void ThreadTransport::claim_lend(Channel& ch, const Envelope& e, int src, const WaitSite& site) {
  if (!try_claim(ch, e.payload.buf.capacity)) refuse_lend(src, site);
}

void ThreadTransport::refuse_lend(int src, const WaitSite& site) {
  state_->bell(src).ring();  // the sender may wait for claims in progress
  check_abort(site, src);
  throw AbortedError("rank " + std::to_string(rank_) + " aborted in " + describe(site.sig) +
                     " (seq " + std::to_string(site.seq) + ", communicator " + site.comm_name +
                     ") because rank " + std::to_string(src) +
                     " withdrew the message it lent for this call: it failed or gave up");
}

void ThreadTransport::finish_lend(Channel& ch, int src) {
  ch.lends_released.fetch_add(1, std::memory_order_release);
  ch.lends_reading.fetch_sub(1, std::memory_order_release);
  state_->bell(src).ring();  // the sender may be asleep in settle()
}

void ThreadTransport::drop_lend(Channel& ch, const Envelope& e, int src) {
  if (src < 0) {  // the sender's own, never pushed: no one can read it
    ++ch.lends_written_off;
    return;
  }
  if (try_claim(ch, e.payload.buf.capacity)) {
    finish_lend(ch, src);  // released unread
  } else {
    state_->bell(src).ring();
  }
}

bool ThreadTransport::peer_gone(int peer) const {
  const RankPhase p = state_->recorder(peer).phase();
  return p == RankPhase::kFinished || p == RankPhase::kFailed;
}

void ThreadTransport::withdraw_lends(Channel& ch, int dst) {
  ch.lends_withdrawn.store(ch.lends_sent, std::memory_order_seq_cst);
  // Claims in progress finish without waiting on anything (a reduce or a copy), unless
  // their rank failed holding one, which then reads no more. all_reduce `shared` holds its
  // claims while it receives the other peers' lends: that wait has its own deadline.
  Doorbell& bell = state_->bell(rank_);
  auto quiet = [&] {
    return ch.lends_reading.load(std::memory_order_seq_cst) == 0 || peer_gone(dst);
  };
  if (sched_) {
    const std::function<bool()> ready = quiet;
    while (!quiet()) block(schedule::WaitKind::kReaders, dst, nullptr, ready);
  }
  for (int i = 0; !quiet(); ++i) {
    if (i < spin_) {
      cpu_relax();
    } else {
      bell.sleep_until(quiet, std::chrono::milliseconds(10));
    }
  }
  ch.lends_written_off = ch.lends_sent - ch.lends_released.load(std::memory_order_acquire);
}

void ThreadTransport::settle(int dst, const WaitSite& site, bool unwinding) {
  if (sched_ && !unwinding) sched_->yield(rank_, schedule::Point::kSettle);
  Channel& ch = state_->channel(rank_, dst);
  auto settled = [&] {
    return ch.lends_released.load(std::memory_order_acquire) + ch.lends_written_off >=
           ch.lends_sent;
  };
  if (settled()) return;
  if (unwinding) {  // this call has failed: no one needs the bytes now
    withdraw_lends(ch, dst);
    return;
  }
  if (sched_) {
    settle_controlled(ch, dst, site);
    return;
  }
  // Published for the watchdog before the yields: on a loaded machine they can outlast its
  // deadline, and its desync report should still name the rank this one waits for.
  const WaitingOn published(state_->recorder(rank_), dst);
  const auto timeout = state_->options().timeout;
  const auto deadline = deadline_after(Clock::now(), timeout);
  if (spin_poll(spin_, settled) || yield_poll(settled)) return;
  Doorbell& bell = state_->bell(rank_);
  while (!settled()) {
    // A receiver that left its job reads no more; after an abort, or at the deadline, the
    // lends are withdrawn so that this rank can fail without a reader left behind.
    if (peer_gone(dst) || state_->aborted()) {
      withdraw_lends(ch, dst);
      check_abort(site, dst);
      return;  // dst returned without receiving: its own error (or the next reset) says so
    }
    const auto now = Clock::now();
    if (now >= deadline) {
      withdraw_lends(ch, dst);
      throw TimeoutError("rank " + std::to_string(rank_) + " timed out after " +
                         seconds_text(timeout) + " in " + describe(site.sig) + " (seq " +
                         std::to_string(site.seq) + ", communicator " + site.comm_name +
                         ") waiting for rank " + std::to_string(dst) +
                         " to release a message lent to it: that rank stopped receiving");
    }
    // Releases ring this rank's bell; leaving a job and aborts ring every bell.
    bell.sleep_until(
        [&] { return settled() || peer_gone(dst) || state_->aborted(); },
        std::min<std::chrono::nanoseconds>(deadline - now, std::chrono::milliseconds(100)));
  }
}

}  // namespace dtsim
