// Whether a waiting rank may poll between sched_yield()s, or should go straight to its
// doorbell: a budget on the wall time that slow yields may cost.
//
// A yield helps when the rank we wait for shares our core and needs it: it runs, sends,
// and yields or sleeps in turn, within tens of microseconds. When another process is
// runnable on the core, the yield may hand it a whole time slice (milliseconds): a rank
// that polls by yielding then loses a slice per poll, where a rank asleep on its doorbell
// is woken by the ring. A slow yield (kSlowYieldNs or more) cannot tell a foreign process
// from a sibling's long turn, but either way the core was contended for longer than a
// futex wake-up costs.
//
// So slow yields run up a debt, kShare times their duration, which time pays off; each
// fast yield pays off kCreditNs more (it spared a futex wake-up). The yield phase is open
// while the debt is at most kShare x kBurstNs: slow yields may take about 1/kShare of the
// wall time after a burst of kBurstNs, more where many fast yields show that yielding
// works. Rare slow yields (a passing compile) leave it open: closing it would make the
// many fast handoffs of an oversubscribed collective pay wake-ups instead. Under
// sustained load it stays closed but for one probe of a few slices now and then.
//
// One gate for the process: its ranks share the cores, whatever their world. A
// per-thread "stop yielding after a slow yield" (tried before) stayed closed in every
// rank that once met a slow yield, and cost the alone N=16 all_reduce 7x.
//
// Thread safety: any thread. open() is one relaxed load per wait that reaches the yield
// phase; note() reads after each yield and writes only while in debt. Not on the message
// path; racing updates may lose a credit or a charge, which is harmless.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace dtsim {

class YieldGate {
 public:
  static constexpr int64_t kSlowYieldNs = 250'000;
  static constexpr int64_t kShare = 4;
  static constexpr int64_t kBurstNs = 20'000'000;
  static constexpr int64_t kCreditNs = 20'000;

  // May a wait at `now_ns` (steady clock) yield?
  bool open(int64_t now_ns) const {
    return paid_off_at_.load(std::memory_order_relaxed) - now_ns <= kBurstNs * kShare;
  }

  // Records a sched_yield() that ran from start_ns to end_ns. False if it was slow: then
  // the caller should sleep for the rest of this wait.
  bool note(int64_t start_ns, int64_t end_ns) {
    const int64_t took = end_ns - start_ns;
    int64_t at = paid_off_at_.load(std::memory_order_relaxed);
    if (took < kSlowYieldNs) {
      if (at > end_ns) paid_off_at_.fetch_sub(kCreditNs * kShare, std::memory_order_relaxed);
      return true;
    }
    while (!paid_off_at_.compare_exchange_weak(at, std::max(at, end_ns) + took * kShare,
                                               std::memory_order_relaxed)) {
    }
    return false;
  }

  // The gate every wait of this process uses.
  static YieldGate& process() { return process_; }

 private:
  static YieldGate process_;

  // When the debt will have been paid off by time alone (steady clock, ns).
  alignas(64) std::atomic<int64_t> paid_off_at_{0};
};

inline YieldGate YieldGate::process_;

}  // namespace dtsim
