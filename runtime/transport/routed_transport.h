// A rank's transport when its peers are reached through more than one plug-in (the hybrid:
// same-process peers through the thread transport's mailboxes, other processes through
// MPI, like NCCL's shared memory inside a node and network between nodes). Each peer is
// routed to one endpoint, chosen once when the World is built (plugin.h): one table load
// per message, no branch on which transport.
//
// Thread safety: one RoutedTransport per rank, used only by that rank's thread.
#pragma once

#include <memory>
#include <vector>

#include "runtime/transport/transport.h"

namespace dtsim {

class RoutedTransport final : public Transport {
 public:
  // `route[peer]` indexes `endpoints` for every global rank peer; every endpoint belongs
  // to the same rank.
  RoutedTransport(std::vector<std::unique_ptr<Transport>> endpoints, const std::vector<int>& route)
      : endpoints_(std::move(endpoints)) {
    by_peer_.reserve(route.size());
    for (int e : route) by_peer_.push_back(endpoints_[e].get());
  }

  int rank() const override { return endpoints_[0]->rank(); }
  int size() const override { return static_cast<int>(by_peer_.size()); }
  void send(int dst, const MessageKey& key, const Signature& sig,
            std::span<const std::byte> payload, const WaitSite& site) override {
    by_peer_[dst]->send(dst, key, sig, payload, site);
  }
  Message recv(int src, const MessageKey& key, const WaitSite& site) override {
    return by_peer_[src]->recv(src, key, site);
  }
  void release(int src, Message& msg) override { by_peer_[src]->release(src, msg); }
  void lend(int dst, const MessageKey& key, const Signature& sig,
            std::span<const std::byte> payload, const WaitSite& site) override {
    by_peer_[dst]->lend(dst, key, sig, payload, site);
  }
  void settle(int dst, const WaitSite& site, bool unwinding) override {
    by_peer_[dst]->settle(dst, site, unwinding);
  }
  bool shares_memory(int peer) const override { return by_peer_[peer]->shares_memory(peer); }
  void lend_shared(int dst, const MessageKey& key, const Signature& sig,
                   std::span<std::byte> payload, const WaitSite& site) override {
    by_peer_[dst]->lend_shared(dst, key, sig, payload, site);
  }

 private:
  std::vector<std::unique_ptr<Transport>> endpoints_;
  std::vector<Transport*> by_peer_;
};

}  // namespace dtsim
