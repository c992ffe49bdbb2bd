#include "runtime/exchange.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <string>

#include "runtime/fast_clock.h"

namespace dtsim {

Exchange::Exchange(Communicator& comm, const Signature& sig)
    : comm_(comm),
      ctx_(*comm.ctx_),
      sig_(sig),
      esize_(dtype_size(sig.dtype)),
      peers_(ctx_.counters.groups[comm.traffic_].peers.data()) {
  // The call's name only for the error: no string built per call.
  if (!comm_.broken_.empty()) comm_.check_usable(describe(sig).c_str());
  site_.comm_name = comm_.name_.c_str();
  site_.seq = comm_.seq_++;
  site_.sig = sig;
  uncaught_ = std::uncaught_exceptions();
  start_ns_ = ctx_.recorder ? ctx_.recorder->begin(comm_.id_, comm_.name_, site_.seq, sig)
                            : FastClock::now_ns();
}

Exchange::~Exchange() {
  // An algorithm settles before it returns; this is for one that throws (or forgot): the
  // caller may free the buffer as soon as the call is over, so no peer may still read it.
  settle_lends(/*unwinding=*/true);
  const bool failed = std::uncaught_exceptions() > uncaught_;
  const int64_t end_ns =
      ctx_.recorder
          ? ctx_.recorder->end(failed ? CallState::kFailed : CallState::kDone, bytes_sent_)
          : FastClock::now_ns();
  if (failed) comm_.broken_ = describe(sig_) + " at seq " + std::to_string(site_.seq);
  OpCounters& c = ctx_.counters[sig_.op];
  c.calls += 1;
  c.steps += static_cast<uint64_t>(done_steps_ + steps_);
  c.nanos += static_cast<uint64_t>(std::max<int64_t>(end_ns - start_ns_, 0));
}

void Exchange::note_step(int step) { steps_ = std::max(steps_, step + 1); }

void Exchange::settle_lends(bool unwinding) {
  if (!lent_) return;
  for (size_t p = 0; p < comm_.lent_.size(); ++p) {
    if (!comm_.lent_[p]) continue;
    ctx_.transport->settle(comm_.ranks_[p], site_, unwinding);
    comm_.lent_[p] = 0;
  }
  lent_ = false;
}

bool Exchange::shares_memory() const { return comm_.shares_memory_; }

void Exchange::post(int peer, int step, const void* data, size_t count, int chunk, Post how) {
  if (tap_) [[unlikely]] {
    ExchangeTap::Post p{peer, step, data, count, chunk};
    tap_->on_post(*this, p);
    peer = p.peer;
    data = p.data;
    count = p.count;
    chunk = p.chunk;
  }
  if (how == Post::kSendOrLend) how = lends(count) ? Post::kLend : Post::kSend;
  note_step(step);
  const size_t bytes = count * esize_;
  const MessageKey key{comm_.id_, site_.seq, static_cast<uint32_t>(base_ + step)};
  const std::span<const std::byte> payload{static_cast<const std::byte*>(data), bytes};
  if (how != Post::kSend) {
    if (how == Post::kLend) {
      ctx_.transport->lend(comm_.ranks_[peer], key, sig_, payload, site_);
    } else {  // the caller handed a writable buffer (lend_shared)
      const std::span<std::byte> shared{const_cast<std::byte*>(payload.data()), bytes};
      ctx_.transport->lend_shared(comm_.ranks_[peer], key, sig_, shared, site_);
    }
    comm_.lent_[peer] = 1;
    lent_ = true;
  } else {
    ctx_.transport->send(comm_.ranks_[peer], key, sig_, payload, site_);
  }
  const size_t counted = how == Post::kLendShared ? 0 : bytes;  // count_shared() counts those
  OpCounters& c = ctx_.counters[sig_.op];
  c.msgs_sent += 1;
  c.bytes_sent += counted;
  bytes_sent_ += counted;
  peers_[peer].msgs_sent += 1;
  peers_[peer].bytes_sent += counted;
  if (ctx_.tracing) {
    ctx_.trace.events.push_back(TraceEvent{TraceKind::kSend,
                                           site_.seq,
                                           sig_.op,
                                           phase(),
                                           step,
                                           comm_.rank_,
                                           peer,
                                           chunk,
                                           count,
                                           sig_.dtype,
                                           {}});
  }
}

void Exchange::run_native(const void* in, void* data, size_t count) {
  comm_.run_native(
      {sig_.op, in, data, count, sig_.dtype, sig_.reduce, sig_.root < 0 ? 0 : sig_.root}, *this);
  const size_t n = static_cast<size_t>(size());
  const size_t phases = sig_.op == OpKind::kAllReduce ? 2 : 1;
  const uint64_t bytes = phases * (count * esize_ / n) * (n - 1);
  OpCounters& c = ctx_.counters[sig_.op];
  c.bytes_sent += bytes;
  c.bytes_recv += bytes;
  bytes_sent_ += bytes;
}

void Exchange::count_shared(int peer, size_t moved, size_t moved_in) {
  OpCounters& c = ctx_.counters[sig_.op];
  c.bytes_sent += moved * esize_;
  bytes_sent_ += moved * esize_;
  peers_[peer].bytes_sent += moved * esize_;
  c.bytes_recv += moved_in * esize_;
  peers_[peer].bytes_recv += moved_in * esize_;
}

Message Exchange::recv(int peer, int step, size_t count) {
  if (tap_) [[unlikely]]
    tap_->on_recv(*this, peer, step, nullptr, &count);
  return take(peer, step, count);
}

Message Exchange::take(int peer, int step, size_t count) {
  note_step(step);
  const MessageKey key{comm_.id_, site_.seq, static_cast<uint32_t>(base_ + step)};
  Message m = ctx_.transport->recv(comm_.ranks_[peer], key, site_);
  if (m.size != count * esize_) {
    const size_t got = m.size;
    ctx_.transport->release(comm_.ranks_[peer], m);
    throw MismatchError("collective size mismatch at seq " + std::to_string(site_.seq) +
                        " on communicator " + comm_.name_ + ": rank " +
                        std::to_string(comm_.rank_) + " in " + describe(sig_) + " expected " +
                        std::to_string(count * esize_) + " bytes from rank " +
                        std::to_string(peer) + " but got " + std::to_string(got) +
                        "; every rank must pass matching lengths (and split sizes)");
  }
  const size_t counted = m.writable ? 0 : m.size;  // a shared lend: count_shared() counts it
  OpCounters& c = ctx_.counters[sig_.op];
  c.msgs_recv += 1;
  c.bytes_recv += counted;
  peers_[peer].msgs_recv += 1;
  peers_[peer].bytes_recv += counted;
  if (ctx_.tracing) {
    ctx_.trace.events.push_back(TraceEvent{TraceKind::kRecv,
                                           site_.seq,
                                           sig_.op,
                                           phase(),
                                           step,
                                           peer,
                                           comm_.rank_,
                                           -1,
                                           count,
                                           sig_.dtype,
                                           {}});
  }
  if (tap_) [[unlikely]]
    tap_->on_took(*this, peer, m);
  return m;
}

void Exchange::release(int peer, Message& m) {
  if (tap_ && !tap_->on_release(*this, peer, m)) [[unlikely]]
    return;
  ctx_.transport->release(comm_.ranks_[peer], m);
}

void Exchange::recv_copy(int peer, int step, void* dst, size_t count) {
  if (tap_) [[unlikely]]
    tap_->on_recv(*this, peer, step, dst, &count);
  Message m = take(peer, step, count);
  if (m.size) std::memcpy(dst, m.data, m.size);
  release(peer, m);
  if (tap_) [[unlikely]]
    tap_->on_done(*this, peer, step);
}

void Exchange::recv_reduce(int peer, int step, void* acc, size_t count, ReduceFn reduce) {
  if (tap_) [[unlikely]]
    tap_->on_recv(*this, peer, step, acc, &count);
  Message m = take(peer, step, count);
  reduce(acc, m.data, count);
  release(peer, m);
  if (tap_) [[unlikely]]
    tap_->on_done(*this, peer, step);
}

void Exchange::snapshot(const void* buf, size_t count) {
  if (!ctx_.tracing) return;
  const auto* p = static_cast<const std::byte*>(buf);
  ctx_.trace.events.push_back(TraceEvent{TraceKind::kSnapshot, site_.seq, sig_.op, phase(), -1,
                                         comm_.rank_, comm_.rank_, -1, count, sig_.dtype,
                                         std::vector<std::byte>(p, p + count * esize_)});
}

std::byte* Exchange::scratch(size_t bytes) {
  if (comm_.scratch_.size() < bytes) comm_.scratch_.resize(bytes);
  return comm_.scratch_.data();
}

}  // namespace dtsim
