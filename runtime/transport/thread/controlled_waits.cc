// The in-process transport's waits under the controlled scheduler: instead of spinning
// and sleeping on a doorbell, a waiting rank blocks in the scheduler with the condition
// it waits for, which the scheduler re-evaluates before every choice. Nothing here has a
// deadline: a wait that can never be met is a deadlock, which the scheduler reports at
// once.
#include <string>

#include "runtime/transport/thread/thread_transport.h"
#include "runtime/transport/transport_wait.h"

namespace dtsim {

void ThreadTransport::block(schedule::WaitKind kind, int peer, const WaitSite* site,
                            const std::function<bool()>& ready) {
  sched_->block(rank_, schedule::Wait{kind, peer, site, &ready});
}

void ThreadTransport::block_sender(int dst, const WaitSite& site,
                                   const std::function<bool()>& can) {
  // Runnable again when there may be room, or when dst returned (wait_as_sender fails then).
  const std::function<bool()> ready = [&] {
    return can() || (dst >= 0 && state_->recorder(dst).phase() == RankPhase::kFinished);
  };
  const WaitingOn published(state_->recorder(rank_), dst);
  block(dst < 0 ? schedule::WaitKind::kBudget : schedule::WaitKind::kRoom, dst, &site, ready);
}

bool ThreadTransport::recv_controlled(Channel& ch, int src, const MessageKey& key,
                                      const WaitSite& site, Envelope* out) {
  const std::function<bool()> ready = [&] { return ch.mail.ready() || peer_gone(src); };
  const WaitingOn published(state_->recorder(rank_), src);
  for (;;) {
    if (try_take(ch, src, key, site, out)) return true;
    check_abort(site, src);
    // A peer in this collective with another fingerprint fails it at once; one that
    // returned from its job will send nothing more: fail now, as the free-running receive
    // does after its grace period, with no time in the message (replays compare it).
    const PeerCheck peer = check_peer(ch, src, key, site, out);
    if (peer == PeerCheck::kArrived) return true;
    if (peer == PeerCheck::kReturned) {
      throw TimeoutError("rank " + std::to_string(rank_) + " gave up in " + describe(site.sig) +
                         " (seq " + std::to_string(site.seq) + ", communicator " + site.comm_name +
                         ") waiting for rank " + std::to_string(src) +
                         ", which already returned from its job: it skipped this call or "
                         "called fewer collectives; every rank must call the same collectives "
                         "in the same order");
    }
    if (state_->pressure()) state_->reclaim(rank_);
    block(schedule::WaitKind::kMessage, src, &site, ready);
  }
}

void ThreadTransport::settle_controlled(Channel& ch, int dst, const WaitSite& site) {
  auto settled = [&] {
    return ch.lends_released.load(std::memory_order_acquire) + ch.lends_written_off >=
           ch.lends_sent;
  };
  const std::function<bool()> ready = [&] { return settled() || peer_gone(dst); };
  const WaitingOn published(state_->recorder(rank_), dst);
  while (!settled()) {
    if (peer_gone(dst) || state_->aborted()) {
      withdraw_lends(ch, dst);
      check_abort(site, dst);
      return;
    }
    block(schedule::WaitKind::kRelease, dst, &site, ready);
  }
}

void ThreadTransport::reclaim_controlled() {
  // One rank thread runs at a time, so this one may empty every rank's cache of buffers:
  // what the free-running world's doorbells ask every sleeping rank to do.
  for (int r = 0; r < state_->size(); ++r) state_->reclaim(r);
}

}  // namespace dtsim
