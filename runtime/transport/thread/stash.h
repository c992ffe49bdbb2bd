// A rank's stash: messages that arrived ahead of the one it waits for (from a peer that
// runs ahead, or a point-to-point message on another tag), indexed by (source, key) so
// that taking one out costs O(1) however many wait. Node storage comes from a pool that
// keeps what it once held, so a warm stash allocates nothing.
//
// Thread safety: used by the owning (receiving) rank's thread only, or between runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory_resource>
#include <unordered_map>

#include "runtime/transport/thread/mail_ring.h"

namespace dtsim {

class alignas(64) Stash {  // its own lines: other ranks poll their stashes
 public:
  Stash() = default;
  Stash(const Stash&) = delete;
  Stash& operator=(const Stash&) = delete;

  bool empty() const { return map_.empty(); }
  size_t size() const { return map_.size(); }
  // False if a message with the same (src, key) already waits: a sender reused a key.
  bool put(int src, const Envelope& e) { return map_.try_emplace(Key{src, e.key}, e).second; }
  // Takes out the message `key` from `src`, if it is here.
  bool take(int src, const MessageKey& key, Envelope* out) {
    if (map_.empty()) return false;
    auto it = map_.find(Key{src, key});
    if (it == map_.end()) return false;
    *out = it->second;
    map_.erase(it);
    return true;
  }
  // f(src, envelope) for every message, in no particular order.
  template <class F>
  void for_each(F&& f) const {
    for (const auto& [k, e] : map_) f(k.src, e);
  }
  void clear() { map_.clear(); }

 private:
  struct Key {
    int src;
    MessageKey key;
    friend bool operator==(const Key&, const Key&) = default;
  };
  struct Hash {
    size_t operator()(const Key& k) const {
      uint64_t h = k.key.comm * 0x9e3779b97f4a7c15ull;
      h ^= (k.key.seq + 0x632be59bd9b4e019ull + (h << 6) + (h >> 2));
      h ^= ((uint64_t(k.key.tag) << 32 | uint32_t(k.src)) + 0x8cb92ba72f3d8dd7ull + (h << 6) +
            (h >> 2));
      return static_cast<size_t>(h * 0xff51afd7ed558ccdull >> 7);
    }
  };
  std::pmr::unsynchronized_pool_resource pool_;
  std::pmr::unordered_map<Key, Envelope, Hash> map_{&pool_};
};

}  // namespace dtsim
