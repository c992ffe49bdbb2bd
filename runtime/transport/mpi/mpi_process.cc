#include "runtime/transport/mpi/mpi_process.h"

#include <sched.h>
#include <semaphore.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "runtime/process_model.h"
#include "runtime/transport/mpi/mpi_link.h"
#include "runtime/types.h"
#include "runtime/world_state.h"

namespace dtsim::mpi {
namespace {
// The progress thread polls without pause for this many idle rounds, then yields for a
// while, then sleeps on its doorbell for at most kIdleNap (a received message has no
// doorbell: MPI must be polled, so the nap bounds the latency an idle thread adds).
constexpr int kSpinRounds = 200;
constexpr auto kYieldFor = std::chrono::microseconds(200);
constexpr auto kIdleNap = std::chrono::microseconds(50);

sem_t g_signal_sem;
volatile sig_atomic_t g_signal = 0;
void on_signal(int sig) {
  g_signal = sig;
  sem_post(&g_signal_sem);  // async-signal-safe
}
}  // namespace

MpiProcess& MpiProcess::instance() {
  static MpiProcess process;
  return process;
}

MpiProcess::MpiProcess() {
  Doorbell::enable_asymmetric_fences();
  sem_init(&g_signal_sem, 0, 0);
  signal_thread_ = std::thread([this] { watch_signals(); });
  struct sigaction sa = {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
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
  sem_post(&g_signal_sem);
  if (signal_thread_.joinable()) signal_thread_.join();
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
  abandon_.store(false);
  detaching_.store(link, std::memory_order_release);
  bell_.ring_always();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool drained = true;
  // Bounded: after the deadline the progress thread lets go of the link within one round of
  // its loop, whose MPI calls never block.
  while (!detached_.load(std::memory_order_acquire) && !stop_.load()) {
    if (drained && std::chrono::steady_clock::now() >= deadline) {
      // Sends to a lost process never complete: the progress thread stops serving the link
      // anyway (the link may be freed only once it has), and its pending buffers are leaked
      // rather than freed under MPI.
      drained = false;
      abandon_.store(true, std::memory_order_release);
      mark_peer_lost();
      bell_.ring_always();
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return drained;
}

void MpiProcess::watch_signals() {
  while (sem_wait(&g_signal_sem) != 0) {
  }
  if (stop_.load()) return;
  const char* name = g_signal == SIGINT ? "SIGINT" : "SIGTERM";
  terminating_.store(true, std::memory_order_release);
  run_termination_cleanup();  // the run cannot finish now: discard its unfinished outputs
  MpiLink* link = link_.load(std::memory_order_acquire);
  std::string where;
  int blamed = -1;
  if (link != nullptr) {
    const ProcessModel& m = link->model();
    WorldState& state = *link->state();
    for (int r = m.first_rank(); r < m.first_rank() + m.threads; ++r) {
      const FlightRecorder& rec = state.recorder(r);
      if (rec.phase() != RankPhase::kRunning) continue;
      FlightEntry e;
      if (!rec.current(&e)) continue;
      if (blamed < 0) blamed = r;
      where += (where.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + " in " +
               e.comm_name + "#" + std::to_string(e.seq) + " " + describe(e.sig);
      const int peer = rec.waiting_on();
      if (peer >= 0) where += " waiting for rank " + std::to_string(peer);
    }
  }
  // The process index from mpirun's environment: the signal may come before MPI_Init has
  // set rank_.
  const int process = ProcessModel::from_environment(0, 1).process;
  const std::string text =
      std::string("process ") + std::to_string(process) + " stopped by " + name +
      (where.empty() ? " outside any collective" : " while " + where) +
      (g_signal == SIGINT ? ""
                          : " (mpirun sends SIGTERM when the job is interrupted, as by Ctrl-C, "
                            "or when another process of the job died, which then names itself "
                            "if it could)");
  if (link == nullptr || blamed < 0) {
    std::fprintf(stderr, "dtsim: %s\n", text.c_str());
    _exit(128 + (g_signal == SIGINT ? SIGINT : SIGTERM));
  }
  // Ranks abort and unwind (output files are discarded); the process exits from main.
  peer_lost_.store(true);  // the others are going away: finalizing could hang
  link->state()->fail(blamed, std::make_exception_ptr(Error(text)));
  for (int i = 0; i < 50; ++i) {
    if (stop_.load()) return;  // the process is exiting normally
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::fprintf(stderr, "dtsim: %s; ranks did not stop within 5 s\n", text.c_str());
  _exit(1);
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
    if (link != nullptr && detaching_.load(std::memory_order_acquire) == link &&
        (link->drained() || abandon_.load(std::memory_order_acquire))) {
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
