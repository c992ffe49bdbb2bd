#include "runtime/transport/mpi/mpi_collectives.h"

#include <string>

#include "runtime/run_state.h"
#include "runtime/transport/transport_wait.h"

namespace dtsim::mpi {

void MpiCollectives::run(const NativeCall& call, const WaitSite& site) {
  RunState& state = *link_->state();
  auto where = [&] {
    return describe(site.sig) + " (seq " + std::to_string(site.seq) + ", communicator " +
           site.comm_name + ")";
  };
  if (broken_) {
    throw UsageError("rank " + std::to_string(rank_) + ": " + where() +
                     ": an earlier MPI collective of this World timed out or was aborted and "
                     "cannot be cancelled; build a new World");
  }
  link_->post_native(&call);
  auto done = [&] { return link_->native_state() == MpiLink::kDone; };
  if (!spin_poll(256, done) && !yield_poll(done)) {
    const auto deadline = deadline_after(Clock::now(), link_->timeout());
    Doorbell& bell = state.bell(rank_);
    while (!done()) {
      const auto now = Clock::now();
      if (state.aborted() || now >= deadline) {
        broken_ = true;
        if (state.aborted()) {
          throw AbortedError("rank " + std::to_string(rank_) + " aborted in MPI's " + where() +
                             " because " + state.abort_reason());
        }
        throw TimeoutError("rank " + std::to_string(rank_) + " timed out after " +
                           seconds_text(link_->timeout()) + " in MPI's " + where() +
                           ": a process did not join the collective (lost, stuck, or it called "
                           "another one)");
      }
      bell.sleep_until(
          [&] { return done() || state.aborted(); },
          std::min<std::chrono::nanoseconds>(deadline - now, std::chrono::milliseconds(100)));
    }
  }
  link_->clear_native();
}

}  // namespace dtsim::mpi
