#include "runtime/transport/thread/thread_transport.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "common/splitmix.h"
#include "runtime/diagnostics/watchdog.h"
#include "runtime/transport/transport_wait.h"

namespace dtsim {
namespace {

// A peer that returned from its job will send nothing more; its receivers stop waiting
// after this long (or at the deadline, if that is sooner) with a TimeoutError naming it.
constexpr std::chrono::milliseconds kReturnedPeerGrace{250};

bool is_collective(const MessageKey& k) { return (k.seq >> 63) == 0; }

}  // namespace

ThreadTransport::ThreadTransport(ThreadShared* state, int rank)
    : state_(state),
      rank_(rank),
      sched_(state->options().scheduler),
      rng_(state->options().jitter_seed * 0x100000001b3ull + rank) {
  const int opt = state->options().spin;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // 256 pauses is ~6.5 us on Zen 4: enough for a peer running on another core, short
  // enough not to starve a peer that shares this core with other processes. With more
  // ranks than cores the peer is likely not running: poll briefly, then yield to it.
  spin_ = opt >= 0 ? opt : (state->size() <= cores ? 256 : 8);
}

void ThreadTransport::jitter() {
  const uint32_t us = state_->options().jitter_us;
  if (us == 0) return;
  const uint64_t r = splitmix64_next(rng_);
  switch (r % 8) {
    case 0:
    case 1:
      sched_yield();
      break;
    case 2:
      std::this_thread::sleep_for(std::chrono::microseconds((r >> 8) % (us + 1)));
      break;
    default:
      break;
  }
}

void ThreadTransport::check_abort(const WaitSite& site, int peer) {
  if (!state_->aborted()) return;
  throw AbortedError("rank " + std::to_string(rank_) + " aborted in " + describe(site.sig) +
                     " (seq " + std::to_string(site.seq) + ", communicator " + site.comm_name +
                     ", peer rank " + std::to_string(peer) + ") because " + state_->abort_reason());
}

void ThreadTransport::send(int dst, const MessageKey& key, const Signature& sig,
                           std::span<const std::byte> payload, const WaitSite& site) {
  jitter();
  if (sched_) sched_->yield(rank_, schedule::Point::kSend);
  check_abort(site, dst);
  Channel& ch = state_->channel(rank_, dst);
  Envelope e;
  e.key = key;
  e.sig = sig;
  e.size = payload.size();
  const bool self = dst == rank_;
  if (e.size >= kLargeMessageBytes && !self) reserve_bytes(ch, e.size, dst, site);
  if (state_->options().unsafe_live_sends && !payload.empty()) {
    e.kind = PayloadKind::kBorrowed;
    e.payload.buf = {const_cast<std::byte*>(payload.data()), 0};
  } else if (e.size <= kInlineBytes) {
    e.kind = PayloadKind::kInline;
    if (e.size) std::memcpy(e.payload.bytes, payload.data(), e.size);
  } else {
    PayloadBuffer b;
    try {
      b = take_buffer(ch, payload.size(), dst, site);
    } catch (...) {
      if (e.size >= kLargeMessageBytes && !self) {
        ch.large_bytes.fetch_sub(e.size, std::memory_order_release);
      }
      throw;
    }
    std::memcpy(b.data, payload.data(), payload.size());
    e.kind = PayloadKind::kPooled;
    e.payload.buf = {b.data, b.capacity};
  }
  if (self) {
    // The receiver is this thread: no ring, whose bound it could only wait out on itself.
    stash_or_fail(rank_, e, site);
    return;
  }
  deliver(ch, e, dst, site);
}

PayloadBuffer ThreadTransport::take_buffer(Channel& ch, size_t size, int dst,
                                           const WaitSite& site) {
  PayloadBuffer b;
  if (ch.free.pop(b)) {
    if (b.capacity >= size) return b;
    state_->free_payload(b);
  }
  if (state_->try_allocate_payload(size, &b)) return b;
  const size_t budget = state_->payload_budget();
  if (payload_capacity(size) > budget) {
    throw UsageError("rank " + std::to_string(rank_) + " in " + describe(site.sig) + " (seq " +
                     std::to_string(site.seq) + ", communicator " + site.comm_name +
                     ") sends a message of " + std::to_string(size) +
                     " bytes, more than the whole world-wide in-flight budget of " +
                     std::to_string(budget) +
                     " bytes; raise WorldOptions::max_bytes_in_flight or send less at once");
  }
  // Flow control: wait for receivers to free buffers (every waiting rank frees its cache).
  auto reclaim = [&] { sched_ ? reclaim_controlled() : state_->reclaim(rank_); };
  reclaim();
  if (state_->try_allocate_payload(size, &b)) return b;
  state_->begin_budget_wait();
  struct EndWait {
    ThreadShared* s;
    ~EndWait() { s->end_budget_wait(); }
  } end_wait{state_};
  const std::function<bool()> room = [&] { return state_->payload_fits(size); };
  wait_as_sender(
      [&] {
        reclaim();
        return state_->try_allocate_payload(size, &b);
      },
      -1, site,
      "waiting for room in the world-wide budget of " + std::to_string(budget) +
          " bytes of payloads in flight (WorldOptions::max_bytes_in_flight) to send " +
          std::to_string(size) + " bytes to rank " + std::to_string(dst) +
          ": the messages sent and not yet received need more; raise the budget, or use an "
          "algorithm that keeps less in flight (ring instead of direct)",
      &room);
  return b;
}

std::string ThreadTransport::budget_note() const {
  // A sender stuck on the budget is the likelier cause of a receiver's timeout; whose
  // deadline fires first is a race, so the receiver names it too.
  if (!state_->pressure()) return {};
  return "meanwhile a rank is waiting for room in the world-wide budget of " +
         std::to_string(state_->payload_budget()) +
         " bytes of payloads in flight (WorldOptions::max_bytes_in_flight): raise the budget, or "
         "use an algorithm that keeps less in flight (ring instead of direct)\n";
}

void ThreadTransport::stash_or_fail(int src, const Envelope& e, const WaitSite& site) {
  if (state_->stash(rank_).put(src, e)) return;
  drop(state_->channel(src, rank_), e, src);
  throw MismatchError("rank " + std::to_string(src) + " sent rank " + std::to_string(rank_) +
                      " two messages with the same key (communicator " + site.comm_name + ", seq " +
                      std::to_string(e.key.seq) + ", tag " + std::to_string(e.key.tag) +
                      ") before it received the first: two communicators share an id, or a "
                      "sequence number was reused");
}

void ThreadTransport::deliver(Channel& ch, const Envelope& e, int dst, const WaitSite& site) {
  if (!ch.mail.push(e)) wait_for_space(ch, e, dst, site);
  state_->bell(dst).ring();
  jitter();
}

void ThreadTransport::drop(Channel& ch, const Envelope& e, int src) {
  if (is_lent(e.kind)) {
    drop_lend(ch, e, src);
    return;
  }
  if (e.size >= kLargeMessageBytes && &ch != &state_->channel(rank_, rank_)) {
    ch.large_bytes.fetch_sub(e.size, std::memory_order_release);
  }
  if (e.kind == PayloadKind::kPooled) {
    state_->free_payload({e.payload.buf.data, e.payload.buf.capacity});
  }
}

void ThreadTransport::reserve_bytes(Channel& ch, size_t bytes, int dst, const WaitSite& site) {
  // Only this (sending) thread adds to large_bytes, so once the check passes it stays true.
  auto fits = [&] {
    const size_t held = ch.large_bytes.load(std::memory_order_acquire);
    return held == 0 || held + bytes <= kChannelByteBudget;
  };
  if (!fits()) {
    const std::function<bool()> can = fits;
    wait_as_sender(fits, dst, site,
                   "sending to rank " + std::to_string(dst) +
                       ", which left a full per-channel budget of this rank's large messages "
                       "unreceived: that rank stopped receiving",
                   &can);
  }
  ch.large_bytes.fetch_add(bytes, std::memory_order_relaxed);
}

void ThreadTransport::wait_for_space(Channel& ch, const Envelope& e, int dst,
                                     const WaitSite& site) {
  try {
    const std::function<bool()> can = [&] { return ch.mail.has_room(); };
    wait_as_sender(
        [&] {
          if (ch.mail.push(e)) return true;
          state_->bell(dst).ring();  // make sure the receiver is awake to drain it
          return false;
        },
        dst, site,
        "sending to rank " + std::to_string(dst) +
            ", which kept its mailbox full: that rank stopped receiving",
        &can);
  } catch (...) {
    drop(ch, e, /*src=*/-1);
    throw;
  }
}

void ThreadTransport::wait_as_sender(const std::function<bool()>& ready, int dst,
                                     const WaitSite& site, const std::string& why,
                                     const std::function<bool()>* can) {
  // A sender waits only when its receiver is far behind (a full mailbox, a spent byte
  // budget): rare, so it polls with doubling sleeps up to 1 ms instead of having the
  // receiver signal on every receive. Under the controlled scheduler it blocks there
  // instead, runnable again when `can` holds, and has no deadline (a deadlock is reported).
  const bool controlled = sched_ && can;
  const auto deadline = deadline_after(Clock::now(), state_->options().timeout);
  auto nap = std::chrono::microseconds(1);
  while (!ready()) {
    check_abort(site, dst < 0 ? rank_ : dst);
    const std::string where = "rank " + std::to_string(rank_) + " in " + describe(site.sig) +
                              " (seq " + std::to_string(site.seq) + ", communicator " +
                              site.comm_name + ")";
    if (dst >= 0 && state_->recorder(dst).phase() == RankPhase::kFinished) {
      // It will never receive again: no point waiting out the deadline.
      throw TimeoutError(where + " gave up sending to rank " + std::to_string(dst) +
                         ", which already returned from its job: it skipped this call or "
                         "called fewer collectives; every rank must call the same collectives "
                         "in the same order");
    }
    if (controlled) {
      block_sender(dst, site, *can);
      continue;
    }
    if (Clock::now() >= deadline) {
      throw TimeoutError(where + " timed out after " + seconds_text(state_->options().timeout) +
                         " " + why);
    }
    std::this_thread::sleep_for(nap);
    nap = std::min(nap * 2, std::chrono::microseconds(1000));
  }
}

void ThreadTransport::check_fingerprint(const Envelope& e, int src, const MessageKey& key,
                                        const WaitSite& site) {
  // Same collective (communicator, sequence number), different call: op, root, reduce op,
  // type, count or algorithm differ. One 24-byte compare per message.
  if (!is_collective(key) || e.key.comm != key.comm || e.key.seq != key.seq || e.sig == site.sig) {
    return;
  }
  drop(state_->channel(src, rank_), e, src);
  throw MismatchError(mismatch_message(key.seq, site.comm_name, rank_, site.sig, src, e.sig));
}

void ThreadTransport::fail_stale(const Envelope& e, int src, const WaitSite& site) {
  // src sent this for a collective this rank has already finished (this rank is at a later
  // sequence number on the same communicator): it can never be received.
  drop(state_->channel(src, rank_), e, src);
  FlightEntry mine;
  bool found = false;
  for (const FlightEntry& x : state_->recorder(rank_).entries()) {
    if (x.comm == e.key.comm && x.seq == e.key.seq) mine = x, found = true;
  }
  if (found && !(mine.sig == e.sig)) {
    throw MismatchError(mismatch_message(e.key.seq, site.comm_name, rank_, mine.sig, src, e.sig));
  }
  throw MismatchError(
      "rank " + std::to_string(src) + " sent " + describe(e.sig) + " (seq " +
      std::to_string(e.key.seq) + ", communicator " + site.comm_name + ") to rank " +
      std::to_string(rank_) + ", which " +
      (found ? "called the same at that seq and finished it" : "had passed that seq") +
      " without receiving it (found at seq " + std::to_string(site.seq) + " in " +
      describe(site.sig) + "); every rank must call the same collectives in the same order");
}

bool ThreadTransport::try_take(Channel& ch, int src, const MessageKey& key, const WaitSite& site,
                               Envelope* out) {
  Envelope e;
  while (ch.mail.pop(e)) {
    check_fingerprint(e, src, key, site);
    if (e.key == key) {
      *out = e;
      return true;
    }
    if (is_collective(e.key) && is_collective(key) && e.key.comm == key.comm &&
        e.key.seq < key.seq) {
      fail_stale(e, src, site);
    }
    stash_or_fail(src, e, site);
  }
  return false;
}

ThreadTransport::PeerCheck ThreadTransport::check_peer(Channel& ch, int src, const MessageKey& key,
                                                       const WaitSite& site, Envelope* out) {
  const FlightRecorder& peer = state_->recorder(src);
  if (peer.phase() == RankPhase::kFinished) {
    // Its sends all happened before it returned: one last look, then it is missing.
    return try_take(ch, src, key, site, out) ? PeerCheck::kArrived : PeerCheck::kReturned;
  }
  uint64_t comm = 0, seq = 0;
  Signature sig;
  if (is_collective(key) && peer.current_fingerprint(&comm, &seq, &sig) && comm == key.comm &&
      seq == key.seq && !(sig == site.sig)) {
    throw MismatchError(mismatch_message(key.seq, site.comm_name, rank_, site.sig, src, sig));
  }
  return PeerCheck::kWaiting;
}

Message ThreadTransport::recv(int src, const MessageKey& key, const WaitSite& site) {
  jitter();
  if (sched_) sched_->yield(rank_, schedule::Point::kRecv);
  Channel& ch = state_->channel(src, rank_);
  Envelope e;
  bool found = takes_first_ && take_first(ch, src, key, site, &e);
  if (!found && (found = state_->stash(rank_).take(src, key, &e))) {
    check_fingerprint(e, src, key, site);
  }
  if (!found && src == rank_) {
    throw MismatchError("rank " + std::to_string(rank_) + " in " + describe(site.sig) + " (seq " +
                        std::to_string(site.seq) + ", communicator " + site.comm_name +
                        ") receives from itself a message it has not sent: a receive from self "
                        "must follow the matching send");
  }
  if (!found && sched_) found = recv_controlled(ch, src, key, site, &e);
  auto take = [&] { return try_take(ch, src, key, site, &e); };
  if (!found) found = spin_poll(spin_, take);
  std::optional<WaitingOn> published;  // for the watchdog, from the first yield on
  if (!found) {
    published.emplace(state_->recorder(rank_), src);
    found = yield_poll(take);
  }
  if (!found) {
    const auto timeout = state_->options().timeout;
    const auto waited_from = Clock::now();
    const auto deadline = deadline_after(waited_from, timeout);
    auto give_up = deadline;  // earlier once the peer has returned from its job
    bool returned = false;
    Doorbell& bell = state_->bell(rank_);
    while (!(found = try_take(ch, src, key, site, &e))) {
      check_abort(site, src);
      const PeerCheck peer = check_peer(ch, src, key, site, &e);
      if (peer == PeerCheck::kArrived) {
        found = true;
        break;
      }
      if (state_->pressure()) state_->reclaim(rank_);
      const auto now = Clock::now();
      if (peer == PeerCheck::kReturned && !returned) {
        returned = true;
        give_up = std::min(deadline, now + kReturnedPeerGrace);
      }
      if (now >= give_up) {
        const auto waited =
            std::chrono::duration_cast<std::chrono::milliseconds>(now - waited_from);
        throw TimeoutError(
            "rank " + std::to_string(rank_) + " timed out after " + seconds_text(waited) + " in " +
            describe(site.sig) + " (seq " + std::to_string(site.seq) + ", communicator " +
            site.comm_name + ") waiting for rank " + std::to_string(src) +
            (returned ? ", which already returned from its job: it skipped this call or called "
                        "fewer collectives; every rank must call the same collectives in the "
                        "same order\n"
                      : ": that rank skipped or reordered a collective, or is stuck; raise the "
                        "timeout if it is only slow\n") +
            budget_note() + desync_report(state_->run()));
      }
      bell.sleep_until(
          [&] { return ch.mail.ready() || state_->aborted(); },
          std::min<std::chrono::nanoseconds>(give_up - now, std::chrono::milliseconds(100)));
    }
  }
  jitter();
  Message m;
  m.size = e.size;
  m.sig = e.sig;
  if (e.kind == PayloadKind::kInline) {
    static_assert(kInlineBytes <= Message::kLocalBytes);
    std::memcpy(m.local, e.payload.bytes, kInlineBytes);
    m.data = m.local;
  } else {
    m.data = e.payload.buf.data;
    m.buffer = e.kind == PayloadKind::kPooled ? m.data : nullptr;
    m.capacity = e.payload.buf.capacity;
    if (is_lent(e.kind)) {
      claim_lend(ch, e, src, site);
      m.lent = true;
      m.writable = e.kind == PayloadKind::kLentShared;
    }
  }
  return m;
}

void ThreadTransport::release(int src, Message& msg) {
  if (msg.lent) {
    // A scheduling point: the lender may return once its lends are released, so what a
    // receiver does before and after this release can race with the lender's next use.
    if (sched_) sched_->yield(rank_, schedule::Point::kRelease);
    finish_lend(state_->channel(src, rank_), src);
    msg.lent = false;
    msg.writable = false;
    return;
  }
  if (msg.size >= kLargeMessageBytes && src != rank_) {  // self-sends skip that budget
    state_->channel(src, rank_).large_bytes.fetch_sub(msg.size, std::memory_order_release);
    msg.size = 0;  // released once
  }
  if (msg.buffer == nullptr) return;
  PayloadBuffer b{static_cast<std::byte*>(msg.buffer), msg.capacity};
  // While a rank waits for the world-wide budget, free instead of caching for reuse.
  if (state_->pressure() || !state_->channel(src, rank_).free.push(b)) state_->free_payload(b);
  msg.buffer = nullptr;
}

}  // namespace dtsim
