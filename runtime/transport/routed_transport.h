// The hybrid world's transport: same-process peers through the in-process mailboxes,
// other peers through MPI, like NCCL's shared memory inside a node and network between
// nodes. A rank's own messages (self-sends) stay local.
//
// Thread safety: one RoutedTransport per rank, used only by that rank's thread.
#pragma once

#include <memory>

#include "runtime/process_model.h"
#include "runtime/transport/transport.h"

namespace dtsim {

class RoutedTransport final : public Transport {
 public:
  RoutedTransport(const ProcessModel& model, std::unique_ptr<Transport> local,
                  std::unique_ptr<Transport> remote)
      : model_(model), local_(std::move(local)), remote_(std::move(remote)) {}

  int rank() const override { return local_->rank(); }
  int size() const override { return model_.world_size(); }
  void send(int dst, const MessageKey& key, const Signature& sig,
            std::span<const std::byte> payload, const WaitSite& site) override {
    to(dst).send(dst, key, sig, payload, site);
  }
  Message recv(int src, const MessageKey& key, const WaitSite& site) override {
    return to(src).recv(src, key, site);
  }
  void release(int src, Message& msg) override { to(src).release(src, msg); }
  void lend(int dst, const MessageKey& key, const Signature& sig,
            std::span<const std::byte> payload, const WaitSite& site) override {
    to(dst).lend(dst, key, sig, payload, site);
  }
  void settle(int dst, const WaitSite& site, bool unwinding) override {
    to(dst).settle(dst, site, unwinding);
  }
  bool shares_memory(int peer) const override {
    return model_.is_local(peer) && local_->shares_memory(peer);
  }
  void lend_shared(int dst, const MessageKey& key, const Signature& sig,
                   std::span<std::byte> payload, const WaitSite& site) override {
    to(dst).lend_shared(dst, key, sig, payload, site);
  }

 private:
  Transport& to(int peer) { return model_.is_local(peer) ? *local_ : *remote_; }

  ProcessModel model_;
  std::unique_ptr<Transport> local_;
  std::unique_ptr<Transport> remote_;
};

}  // namespace dtsim
