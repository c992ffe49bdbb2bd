#include "runtime/transport/mpi/mpi_transport.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <thread>

#include "runtime/diagnostics/watchdog.h"
#include "runtime/run_state.h"
#include "runtime/transport/transport_wait.h"

namespace dtsim::mpi {
namespace {
bool is_collective(const MessageKey& k) { return (k.seq >> 63) == 0; }
}  // namespace

MpiTransport::MpiTransport(MpiLink* link, int rank)
    : link_(link), queues_(link->queues(rank - link->model().first_rank())), rank_(rank) {
  stash_.reserve(64);
}

MpiTransport::~MpiTransport() {
  for (WireBuf b : stash_) free_wire(b);
}

void MpiTransport::check_abort(const WaitSite& site, int peer) {
  RunState& state = *link_->state();
  if (!state.aborted()) return;
  throw AbortedError("rank " + std::to_string(rank_) + " aborted in " + describe(site.sig) +
                     " (seq " + std::to_string(site.seq) + ", communicator " + site.comm_name +
                     ", peer rank " + std::to_string(peer) + ") because " + state.abort_reason());
}

void MpiTransport::send(int dst, const MessageKey& key, const Signature& sig,
                        std::span<const std::byte> payload, const WaitSite& site) {
  check_abort(site, dst);
  WireBuf spare;
  while (queues_.spare.pop(spare)) pool_.put(spare);
  WireBuf b = pool_.take(payload.size());
  WireHeader& h = b.header();
  h = WireHeader{};
  h.epoch = link_->epoch();
  h.kind = WireKind::kData;
  h.src = rank_;
  h.dst = dst;
  h.key = key;
  h.sig = sig;
  h.size = payload.size();
  if (!payload.empty()) std::memcpy(b.payload(), payload.data(), payload.size());
  if (!queues_.out.push(b)) {
    // The progress thread is kQueueDepth sends behind: rare; poll with a deadline.
    const auto deadline = deadline_after(Clock::now(), link_->timeout());
    auto nap = std::chrono::microseconds(1);
    while (!queues_.out.push(b)) {
      link_->progress_bell().ring();
      try {
        check_abort(site, dst);
      } catch (...) {
        free_wire(b);
        throw;
      }
      if (Clock::now() >= deadline) {
        free_wire(b);
        throw TimeoutError("rank " + std::to_string(rank_) + " timed out after " +
                           seconds_text(link_->timeout()) + " in " + describe(site.sig) + " (seq " +
                           std::to_string(site.seq) + ", communicator " + site.comm_name +
                           ") sending to rank " + std::to_string(dst) +
                           ": this process's MPI progress thread stopped taking sends");
      }
      std::this_thread::sleep_for(nap);
      nap = std::min(nap * 2, std::chrono::microseconds(1000));
    }
  }
  link_->progress_bell().ring();
}

void MpiTransport::lend(int dst, const MessageKey& key, const Signature& sig,
                        std::span<const std::byte> payload, const WaitSite& site) {
  send(dst, key, sig, payload, site);
}

void MpiTransport::settle(int dst, const WaitSite& site, bool unwinding) {
  if (!unwinding) check_abort(site, dst);
}

void MpiTransport::give_back(WireBuf b) {
  if (!queues_.returned.push(b)) free_wire(b);
}

bool MpiTransport::screen(WireBuf b, const MessageKey& key, const WaitSite& site) {
  const WireHeader& h = b.header();
  if (h.epoch != link_->epoch()) {  // left over from an earlier run
    give_back(b);
    return true;
  }
  if (is_collective(key) && h.key.comm == key.comm && h.key.seq == key.seq &&
      !(h.sig == site.sig)) {
    const int src = h.src;
    const Signature theirs = h.sig;
    give_back(b);
    throw MismatchError(mismatch_message(key.seq, site.comm_name, rank_, site.sig, src, theirs));
  }
  if (is_stale(h, key)) fail_stale(b, site);
  return false;
}

bool MpiTransport::is_stale(const WireHeader& h, const MessageKey& key) {
  // A collective of the same communicator at an earlier sequence number: this rank has
  // finished that call without receiving it, so it never will.
  return is_collective(key) && is_collective(h.key) && h.key.comm == key.comm &&
         h.key.seq < key.seq;
}

void MpiTransport::fail_stale(WireBuf b, const WaitSite& site) {
  const WireHeader h = b.header();
  give_back(b);
  FlightEntry mine;
  bool found = false;
  for (const FlightEntry& x : link_->state()->recorder(rank_).entries()) {
    if (x.comm == h.key.comm && x.seq == h.key.seq) mine = x, found = true;
  }
  if (found && !(mine.sig == h.sig)) {
    throw MismatchError(mismatch_message(h.key.seq, site.comm_name, rank_, mine.sig, h.src, h.sig));
  }
  throw MismatchError(
      "rank " + std::to_string(h.src) + " sent " + describe(h.sig) + " (seq " +
      std::to_string(h.key.seq) + ", communicator " + site.comm_name + ") to rank " +
      std::to_string(rank_) + ", which " +
      (found ? "called the same at that seq and finished it" : "had passed that seq") +
      " without receiving it (found at seq " + std::to_string(site.seq) + " in " +
      describe(site.sig) + "); every rank must call the same collectives in the same order");
}

bool MpiTransport::try_take(int src, const MessageKey& key, const WaitSite& site, WireBuf* out) {
  WireBuf b;
  while (queues_.in.pop(b)) {
    if (screen(b, key, site)) continue;
    if (b.header().src == src && b.header().key == key) {
      *out = b;
      return true;
    }
    stash_.push_back(b);
  }
  return false;
}

Message MpiTransport::recv(int src, const MessageKey& key, const WaitSite& site) {
  WireBuf b;
  bool found = false;
  const uint64_t epoch = link_->epoch();
  for (size_t i = 0; i < stash_.size();) {
    const WireHeader& h = stash_[i].header();
    if (h.epoch != epoch) {
      give_back(stash_[i]);
      stash_.erase(stash_.begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    if (h.src == src && h.key == key) {
      b = stash_[i];
      stash_.erase(stash_.begin() + static_cast<std::ptrdiff_t>(i));
      found = true;
      break;
    }
    if (is_stale(h, key)) {
      const WireBuf stale = stash_[i];
      stash_.erase(stash_.begin() + static_cast<std::ptrdiff_t>(i));
      fail_stale(stale, site);
    }
    ++i;
  }
  auto take = [&] { return try_take(src, key, site, &b); };
  if (!found) found = spin_poll(256, take);
  std::optional<WaitingOn> published;
  if (!found) {
    published.emplace(link_->state()->recorder(rank_), src);
    found = yield_poll(take);
  }
  if (!found) {
    RunState& state = *link_->state();
    const auto waited_from = Clock::now();
    const auto deadline = deadline_after(waited_from, link_->timeout());
    Doorbell& bell = state.bell(rank_);
    while (!(found = take())) {
      check_abort(site, src);
      const auto now = Clock::now();
      if (now >= deadline) {
        const ProcessModel& m = link_->model();
        throw TimeoutError(
            "rank " + std::to_string(rank_) + " timed out after " + seconds_text(link_->timeout()) +
            " in " + describe(site.sig) + " (seq " + std::to_string(site.seq) + ", communicator " +
            site.comm_name + ") waiting for rank " + std::to_string(src) + " in MPI process " +
            std::to_string(m.process_of(src)) +
            ": that process was lost (killed or crashed), is stuck, or skipped or reordered a "
            "collective; raise the timeout if it is only slow");
      }
      bell.sleep_until(
          [&] { return queues_.in.read_available() > 0 || state.aborted(); },
          std::min<std::chrono::nanoseconds>(deadline - now, std::chrono::milliseconds(100)));
    }
  }
  Message m;
  m.size = b.header().size;
  m.sig = b.header().sig;
  m.data = b.payload();
  m.buffer = b.data;
  m.capacity = b.capacity;
  return m;
}

void MpiTransport::release(int, Message& msg) {
  if (msg.buffer == nullptr) return;
  give_back({static_cast<std::byte*>(msg.buffer), msg.capacity});
  msg.buffer = nullptr;
}

}  // namespace dtsim::mpi
