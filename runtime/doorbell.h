// A rank's doorbell: lets a thread that found nothing to do sleep in the kernel (futex)
// until another thread publishes work for it, without a syscall per message.
//
// Thread safety: ring() may be called from any thread; sleep_until() only by the owner.
// Protocol (no lost wake-ups): the notifier publishes, then fences and reads sleepers_;
// the owner increments sleepers_, fences, re-checks its condition, then futex-waits on the
// epoch it read *before* the re-check, so a ring in between makes the wait return at once.
//
// The fences are asymmetric where the kernel allows it (membarrier(2), as in folly's
// asymmetricHeavyBarrier and userspace RCU): the notifier, on every message, needs only a
// compiler barrier, and the owner, on its way to sleep, forces a full barrier on every
// running thread of the process. A seq_cst fence on the notifier's side made each send
// wait for its store to the receiver's mailbox line to land (about 40 ns here, a third of
// an 8-byte message's latency); the sleep path already costs a futex call.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace dtsim {

class alignas(64) Doorbell {
 public:
  // Wakes the owner if it is (or is about to be) asleep. Cheap when it is not: one fence
  // and one load, no read-modify-write on the owner's cache line.
  void ring() {
    if (asymmetric_fences_.load(std::memory_order_relaxed)) {
      std::atomic_signal_fence(std::memory_order_seq_cst);  // the sleeper does the rest
    } else {
      std::atomic_thread_fence(std::memory_order_seq_cst);
    }
    if (sleepers_.load(std::memory_order_relaxed) != 0) ring_always();
  }

  // Registers the process for membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) and, if the
  // kernel allows it, switches every doorbell to asymmetric fences. Call before the
  // threads that ring or sleep start (RunState does); idempotent.
  static void enable_asymmetric_fences();

  // Wakes the owner unconditionally (abort, shutdown).
  void ring_always();

  // Sleeps until `ready()` holds, a ring arrives, or `timeout` passes; returns ready().
  template <class Ready>
  bool sleep_until(Ready&& ready, std::chrono::nanoseconds timeout) {
    const uint32_t seen = epoch_.load(std::memory_order_acquire);
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (asymmetric_fences_.load(std::memory_order_relaxed)) heavy_barrier();
    if (!ready()) wait(seen, timeout);
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
    return ready();
  }

 private:
  void wait(uint32_t seen, std::chrono::nanoseconds timeout);
  // A full memory barrier on every running thread of the process (membarrier).
  static void heavy_barrier();
  static inline std::atomic<bool> asymmetric_fences_{false};

  std::atomic<uint32_t> epoch_{0};
  std::atomic<uint32_t> sleepers_{0};
};

}  // namespace dtsim
