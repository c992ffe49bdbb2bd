// A rank's endpoint to ranks in other processes, over the process's MPI progress thread
// (mpi_link.h). Same contract as every Transport (transport.h):
//   - send() is a snapshot: the payload is copied into a pooled wire buffer behind a
//     header carrying the key and the collective fingerprint;
//   - recv() matches on (source, key) in software, with a stash, and raises MismatchError
//     when a message of the same collective (communicator, sequence number) carries
//     another fingerprint, AbortedError when any rank of any process failed, and
//     TimeoutError naming the peer, its process and the collective at the deadline;
//   - lend() copies too, and settle() has nothing to wait for: an MPI_Isend of the
//     caller's own bytes cannot be withdrawn at a deadline (cancelling sends is
//     deprecated in MPI 4), so the contract "when settle returns or throws, no one reads
//     the lent bytes" could not hold.
//
// Thread safety: one MpiTransport per rank, used only by that rank's thread.
#pragma once

#include <vector>

#include "runtime/transport/mpi/mpi_link.h"
#include "runtime/transport/mpi/wire_pool.h"
#include "runtime/transport/transport.h"

namespace dtsim::mpi {

class MpiTransport final : public Transport {
 public:
  MpiTransport(MpiLink* link, int rank);
  ~MpiTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return link_->model().world_size(); }
  void send(int dst, const MessageKey& key, const Signature& sig,
            std::span<const std::byte> payload, const WaitSite& site) override;
  Message recv(int src, const MessageKey& key, const WaitSite& site) override;
  void release(int src, Message& msg) override;
  void lend(int dst, const MessageKey& key, const Signature& sig,
            std::span<const std::byte> payload, const WaitSite& site) override;
  void settle(int dst, const WaitSite& site, bool unwinding) override;

 private:
  // Looks at the stash and the `in` queue; true (and *out) if (src, key) is there.
  bool try_take(int src, const MessageKey& key, const WaitSite& site, WireBuf* out);
  // Drops a message of an earlier run, or throws MismatchError; false if `b` is kept.
  bool screen(WireBuf b, const MessageKey& key, const WaitSite& site);
  // Whether `h` belongs to a collective of key's communicator that this rank has finished.
  static bool is_stale(const WireHeader& h, const MessageKey& key);
  // MismatchError for such a message, naming both calls when this rank's recorder still
  // holds its own call at that sequence number (gives `b` back first).
  [[noreturn]] void fail_stale(WireBuf b, const WaitSite& site);
  void give_back(WireBuf b);
  void check_abort(const WaitSite& site, int peer);

  MpiLink* link_;
  MpiLink::RankQueues& queues_;
  int rank_;
  WirePool pool_;
  std::vector<WireBuf> stash_;  // arrived ahead of the message this rank waits for
};

}  // namespace dtsim::mpi
