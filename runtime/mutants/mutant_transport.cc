// The planted transport bugs: the thread transport with one step replaced through its
// seams (thread_transport.h, protected).
#include <memory>

#include "runtime/mutants/mutants.h"
#include "runtime/transport/thread/thread_transport.h"

namespace dtsim::mutants {
namespace {

// kRecvWrongStep: recv takes the newest pending message of this call from src, not the
// one of its step.
class RecvWrongStep final : public ThreadTransport {
 public:
  RecvWrongStep(ThreadShared* state, int rank) : ThreadTransport(state, rank) {
    takes_first_ = true;
  }

 protected:
  bool take_first(Channel& ch, int src, const MessageKey& key, const WaitSite& site,
                  Envelope* out) override {
    Envelope e;
    while (ch.mail.pop(e)) {
      check_fingerprint(e, src, key, site);
      stash_or_fail(src, e, site);
    }
    Stash& stash = state_->stash(rank_);
    bool found = false;
    MessageKey newest{};
    stash.for_each([&](int s, const Envelope& x) {
      if (s != src || x.key.comm != key.comm || x.key.seq != key.seq) return;
      if (!found || x.key.tag > newest.tag) newest = x.key;
      found = true;
    });
    return found && stash.take(src, newest, out);
  }
};

// kLendClaimRace: a lend claim looks for the withdrawal, then announces its read: not
// atomic, so the sender may withdraw (and reuse its buffer) in between.
class LendClaimRace final : public ThreadTransport {
 public:
  using ThreadTransport::ThreadTransport;

 protected:
  void claim_lend(Channel& ch, const Envelope& e, int src, const WaitSite& site) override {
    if (ch.lends_withdrawn.load(std::memory_order_seq_cst) < e.payload.buf.capacity) {
      if (sched_) sched_->yield(rank_, schedule::Point::kRecv);
      ch.lends_reading.fetch_add(1, std::memory_order_seq_cst);
      return;
    }
    refuse_lend(src, site);
  }
};

}  // namespace

std::unique_ptr<Transport> recv_wrong_step_transport(ThreadShared* state, int rank) {
  return std::make_unique<RecvWrongStep>(state, rank);
}

std::unique_ptr<Transport> lend_claim_race_transport(ThreadShared* state, int rank) {
  return std::make_unique<LendClaimRace>(state, rank);
}

}  // namespace dtsim::mutants
