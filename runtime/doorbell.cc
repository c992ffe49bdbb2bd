#include "runtime/doorbell.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <ctime>

namespace dtsim {
namespace {

long futex(std::atomic<uint32_t>* addr, int op, uint32_t val, const timespec* timeout) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), op, val, timeout, nullptr, 0);
}

}  // namespace

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
