#include "runtime/transport/mpi/mpi_process.h"

#include <sched.h>

#include <cstdlib>

#include "runtime/transport/mpi/mpi_link.h"
#include "runtime/types.h"

namespace dtsim::mpi {
namespace {
// The progress thread polls without pause for this many idle rounds, then yields for a
// while, then sleeps on its doorbell for at most kIdleNap (a received message has no
// doorbell: MPI must be polled, so the nap bounds the latency an idle thread adds).
constexpr int kSpinRounds = 200;
constexpr auto kYieldFor = std::chrono::microseconds(200);
constexpr auto kIdleNap = std::chrono::microseconds(50);
}  // namespace

MpiProcess& MpiProcess::instance() {
  static MpiProcess process;
  return process;
}

MpiProcess::MpiProcess() {
  Doorbell::enable_asymmetric_fences();
  thread_ = std::thread([this] { main(); });
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return started_; });
  if (provided_ < MPI_THREAD_FUNNELED) {
    throw Error("MPI provides thread level " + std::to_string(provided_) +
                ", below MPI_THREAD_FUNNELED; dtsim's progress thread needs FUNNELED");
  }
}

MpiProcess::~MpiProcess() {
  stop_.store(true);
  bell_.ring_always();
  if (thread_.joinable()) thread_.join();
}

void MpiProcess::attach(MpiLink* link) {
  link->future = &future_;
  link->recv_pool = &recv_pool_;
  link_.store(link, std::memory_order_release);
  bell_.ring_always();
}

bool MpiProcess::detach(MpiLink* link, std::chrono::milliseconds timeout) {
  detached_.store(false);
  detaching_.store(link, std::memory_order_release);
  bell_.ring_always();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!detached_.load(std::memory_order_acquire)) {
    if (std::chrono::steady_clock::now() >= deadline) {
      // Sends to a lost process never complete: stop serving the link anyway; its pending
      // buffers are leaked rather than freed under MPI.
      link_.store(nullptr, std::memory_order_release);
      detaching_.store(nullptr);
      mark_peer_lost();
      return false;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

void MpiProcess::main() {
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  {
    std::lock_guard<std::mutex> lock(mu_);
    provided_ = provided;
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    started_ = true;
  }
  cv_.notify_all();
  int idle = 0;
  auto idle_since = std::chrono::steady_clock::now();
  while (!stop_.load(std::memory_order_acquire)) {
    MpiLink* link = link_.load(std::memory_order_acquire);
    bool busy = false;
    if (link != nullptr) busy |= link->progress(comm_);
    // Receive everything that has arrived: one matched probe and receive per message.
    for (;;) {
      int flag = 0;
      MPI_Message msg;
      MPI_Status status;
      if (MPI_Improbe(MPI_ANY_SOURCE, 0, comm_, &flag, &msg, &status) != MPI_SUCCESS || !flag) {
        break;
      }
      int bytes = 0;
      MPI_Get_count(&status, MPI_BYTE, &bytes);
      WireBuf b = recv_pool_.take(static_cast<size_t>(bytes) - kHeaderBytes);
      MPI_Mrecv(b.data, bytes, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
      if (link != nullptr) {
        link->dispatch(b);
      } else {
        future_.push_back(b);
      }
      busy = true;
    }
    if (link != nullptr && detaching_.load(std::memory_order_acquire) == link && link->drained()) {
      link_.store(nullptr, std::memory_order_release);
      detaching_.store(nullptr);
      detached_.store(true, std::memory_order_release);
    }
    if (busy) {
      idle = 0;
      continue;
    }
    if (++idle == 1) idle_since = std::chrono::steady_clock::now();
    if (idle < kSpinRounds) continue;
    if (std::chrono::steady_clock::now() - idle_since < kYieldFor) {
      sched_yield();
      continue;
    }
    bell_.sleep_until([] { return false; }, kIdleNap);
  }
  for (WireBuf b : future_) free_wire(b);
  future_.clear();
  if (!peer_lost_.load()) {
    MPI_Comm_free(&comm_);
    MPI_Finalize();
  }
}

}  // namespace dtsim::mpi
