// The in-process transport's waits under the controlled scheduler: instead of spinning
// and sleeping on a doorbell, a waiting rank blocks in the scheduler with the condition
// it waits for, which the scheduler re-evaluates before every choice. Also the planted
// recv-wrong-step mutant's receive.
#include "runtime/thread_transport.h"

namespace dtsim {

void ThreadTransport::block(schedule::WaitKind kind, int peer, const WaitSite* site,
                            const std::function<bool()>& ready) {
  sched_->block(rank_, schedule::Wait{kind, peer, site, &ready});
}

bool ThreadTransport::recv_controlled(Channel& ch, int src, const MessageKey& key,
                                      const WaitSite& site, Envelope* out) {
  const std::function<bool()> ready = [&] { return ch.mail.ready(); };
  for (;;) {
    if (try_take(ch, src, key, site, out)) return true;
    check_abort(site, src);
    // A peer in this collective with another fingerprint fails it at once. A peer that
    // returned stays waited for: the deadlock report names it when nothing else can run.
    if (check_peer(ch, src, key, site, out) == PeerCheck::kArrived) return true;
    block(schedule::WaitKind::kMessage, src, &site, ready);
  }
}

void ThreadTransport::settle_controlled(Channel& ch, int dst, const WaitSite& site) {
  auto settled = [&] {
    return ch.lends_released.load(std::memory_order_acquire) + ch.lends_written_off >=
           ch.lends_sent;
  };
  const std::function<bool()> ready = [&] { return settled() || peer_gone(dst); };
  while (!settled()) {
    if (peer_gone(dst) || state_->aborted()) {
      withdraw_lends(ch, dst);
      check_abort(site, dst);
      return;
    }
    block(schedule::WaitKind::kRelease, dst, &site, ready);
  }
}

bool ThreadTransport::take_newest(Channel& ch, int src, const MessageKey& key, const WaitSite& site,
                                  Envelope* out) {
  Envelope e;
  while (ch.mail.pop(e)) {
    check_fingerprint(e, src, key, site);
    ch.stash.push_back(e);
  }
  for (size_t i = ch.stash.size(); i-- > 0;) {
    const MessageKey& k = ch.stash[i].key;
    if (k.comm == key.comm && k.seq == key.seq) {
      *out = ch.stash[i];
      ch.stash.erase(ch.stash.begin() + static_cast<std::ptrdiff_t>(i));
      return true;
    }
  }
  return false;
}

}  // namespace dtsim
