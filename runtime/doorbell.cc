#include "runtime/doorbell.h"

#include <linux/futex.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <ctime>
#include <mutex>

namespace dtsim {
namespace {

long futex(std::atomic<uint32_t>* addr, int op, uint32_t val, const timespec* timeout) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), op, val, timeout, nullptr, 0);
}

long membarrier(int cmd) { return syscall(SYS_membarrier, cmd, 0, 0); }

}  // namespace

void Doorbell::enable_asymmetric_fences() {
  static std::once_flag once;
  std::call_once(once, [] {
    const long cmds = membarrier(MEMBARRIER_CMD_QUERY);
    if (cmds < 0 || !(cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED)) return;
    if (membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) != 0) return;
    asymmetric_fences_.store(true, std::memory_order_release);
  });
}

void Doorbell::heavy_barrier() {
  // Registered, so this should not fail; if it ever does, every ring from now on fences
  // again (a ring racing this one sleep is then caught by the sleeper's 100 ms naps).
  if (membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0) {
    asymmetric_fences_.store(false, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
}

void Doorbell::ring_always() {
  epoch_.fetch_add(1, std::memory_order_release);
  futex(&epoch_, FUTEX_WAKE_PRIVATE, INT_MAX, nullptr);
}

void Doorbell::wait(uint32_t seen, std::chrono::nanoseconds timeout) {
  if (timeout.count() <= 0) return;
  timespec ts;
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1000000000);
  ts.tv_nsec = static_cast<long>(timeout.count() % 1000000000);
  futex(&epoch_, FUTEX_WAIT_PRIVATE, seen, &ts);  // returns at once if epoch_ != seen
}

}  // namespace dtsim
