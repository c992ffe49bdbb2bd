#include "runtime/transport/mpi/mpi_process.h"

#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "runtime/process_model.h"
#include "runtime/run_state.h"
#include "runtime/transport/mpi/mpi_link.h"
#include "runtime/transport/transport_wait.h"
#include "runtime/types.h"

namespace dtsim::mpi {
namespace {
// The progress thread polls without pause for this many idle rounds, then yields for a
// while, then sleeps on its doorbell for at most kIdleNap (a received message has no
// doorbell: MPI must be polled, so the nap bounds the latency an idle thread adds).
constexpr int kSpinRounds = 200;
constexpr auto kYieldFor = std::chrono::microseconds(200);
constexpr auto kIdleNap = std::chrono::microseconds(50);
// How often the progress thread looks whether this process made progress, and beats if so.
constexpr auto kBeatEvery = std::chrono::milliseconds(500);
// How much longer than the start's deadline instance() waits for MPI_Init to return.
constexpr auto kStartGrace = std::chrono::seconds(2);

uint64_t g_start_error = 0;  // set_start()'s, read by the constructor
std::string g_start_alone;
std::string g_start_config;
// The constructor gave up on MPI_Init: the progress thread, if it ever returns from it,
// must not touch the MpiProcess (set once, never cleared).
std::atomic<bool> g_abandoned{false};

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

void MpiProcess::set_start(uint64_t error_hash, std::string error_alone, std::string config) {
  g_start_error = error_hash;
  g_start_alone = std::move(error_alone);
  g_start_config = std::move(config);
}

MpiProcess::MpiProcess()
    : start_deadline_(std::chrono::steady_clock::now() + kStartDeadline),
      start_error_(g_start_error),
      start_alone_(g_start_alone),
      start_config_(g_start_config) {
  Doorbell::enable_asymmetric_fences();
  set_owner();
  sem_init(&g_signal_sem, 0, 0);
  signal_thread_ = std::thread([this] { watch_signals(); });
  struct sigaction sa = {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  thread_ = std::thread([this] { main(); });
  std::unique_lock<std::mutex> lock(mu_);
  // MPI_Init waits for every process of the job: one that never starts MPI must not hold
  // this one forever. Then MPI is unusable here; the program ends (job_start.h).
  if (!cv_.wait_until(lock, start_deadline_ + kStartGrace, [&] { return started_; })) {
    abandoned_ = true;
    g_abandoned.store(true, std::memory_order_release);
    peer_lost_.store(true);
    const ProcessModel job = ProcessModel::from_environment(0, 1);
    rank_ = job.process;
    size_ = job.processes;
    start_.agreed = false;
    start_.process = rank_;
    start_.errors.assign(size_, 0);
    start_.errors.at(rank_) = start_error_;
    start_.configs.assign(size_, "");
    start_.configs.at(rank_) = start_config_;
    ending_.store(start_error_ != 0, std::memory_order_release);
    start_done_.store(true, std::memory_order_release);
    return;
  }
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
  if (abandoned_) {
    thread_.detach();  // still in MPI_Init, perhaps for good
  } else if (thread_.joinable()) {
    thread_.join();
  }
}

void MpiProcess::set_owner() {
  clockid_t clock;
  if (pthread_getcpuclockid(pthread_self(), &clock) != 0) return;
  owner_clock_.store(clock, std::memory_order_relaxed);
  owner_known_.store(true, std::memory_order_release);
}

bool MpiProcess::beat(MpiLink* link) {
  if (size_ < 2) return false;
  const auto now = std::chrono::steady_clock::now();
  if (now - beat_checked_ < kBeatEvery) return false;
  beat_checked_ = now;
  bool progressed = false;
  if (owner_known_.load(std::memory_order_acquire) &&
      owner_waiting_.load(std::memory_order_acquire) == 0) {
    timespec ts;
    // Fails once the thread has exited: no progress of it then.
    if (clock_gettime(owner_clock_.load(std::memory_order_relaxed), &ts) == 0) {
      const int64_t cpu = static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
      progressed |= cpu != owner_cpu_;
      owner_cpu_ = cpu;
    }
  }
  if (link != nullptr) {
    const uint64_t p = link->local_progress();
    progressed |= p != link_progress_;
    link_progress_ = p;
  }
  if (!progressed) return false;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    if (beat_requests_[p] != MPI_REQUEST_NULL) {  // the last beat to p is still in flight
      int done = 0;
      MPI_Test(&beat_requests_[p], &done, MPI_STATUS_IGNORE);
      if (!done) continue;
    }
    WireHeader& h = *reinterpret_cast<WireHeader*>(beat_buffers_.data() + p * kHeaderBytes);
    h = WireHeader{};
    h.kind = WireKind::kAlive;
    h.src = -1;
    h.dst = p;
    MPI_Isend(&h, static_cast<int>(kHeaderBytes), MPI_BYTE, p, 0, comm_, &beat_requests_[p]);
  }
  return true;
}

void MpiProcess::attach(MpiLink* link) {
  set_owner();  // the thread that builds a World runs it
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
  const auto deadline = deadline_after(std::chrono::steady_clock::now(), timeout);  // saturating
  bool drained = true;
  const OwnerWaiting waiting(*this);
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
  for (;;) {
    while (sem_wait(&g_signal_sem) != 0) {
    }
    if (stop_.load()) return;
    // The start ended the job: every process is exiting 2 already, and mpirun sends
    // SIGTERM when the first of them exits.
    if (!ending_.load(std::memory_order_acquire)) break;
  }
  const char* name = g_signal == SIGINT ? "SIGINT" : "SIGTERM";
  terminating_.store(true, std::memory_order_release);
  run_termination_cleanup();  // the run cannot finish now: discard its unfinished outputs
  if (!start_done_.load(std::memory_order_acquire) && !start_alone_.empty()) {
    // A process ended before the start: this one's usage error is the news, not the signal.
    std::fputs(start_alone_.c_str(), stderr);
    _exit(2);
  }
  MpiLink* link = link_.load(std::memory_order_acquire);
  std::string where;
  int blamed = -1;
  if (link != nullptr) {
    const ProcessModel& m = link->model();
    RunState& state = *link->state();
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

bool MpiProcess::wait_for_start(MPI_Request* req) {
  for (;;) {
    int done = 0;
    if (MPI_Test(req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return false;
    if (done) return true;
    if (std::chrono::steady_clock::now() >= start_deadline_) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

JobStart MpiProcess::agree_on_start(int rank, int size) {
  JobStart start;
  start.process = rank;
  start.errors.assign(size, 0);
  start.errors[rank] = start_error_;
  start.configs.assign(size, "");
  start.configs[rank] = start_config_;
  if (size == 1) return start;
  // First each process's error and the length of its configuration, then the texts.
  start_send_ = {start_error_, start_config_.size()};
  start_recv_.assign(2 * size, 0);
  MPI_Request req = MPI_REQUEST_NULL;
  if (MPI_Iallgather(start_send_.data(), 2, MPI_UINT64_T, start_recv_.data(), 2, MPI_UINT64_T,
                     comm_, &req) == MPI_SUCCESS &&
      wait_for_start(&req)) {
    for (int p = 0; p < size; ++p) start.errors[p] = start_recv_[2 * p];
    // Texts longer than this are compared by their first kMaxConfigBytes (the CLI's are ~2 kB).
    constexpr uint64_t kMaxConfigBytes = 1 << 20;
    start_counts_.assign(size, 0);
    start_displs_.assign(size, 0);
    uint64_t total = 0;
    for (int p = 0; p < size; ++p) {
      start_counts_[p] = static_cast<int>(std::min(start_recv_[2 * p + 1], kMaxConfigBytes));
      start_displs_[p] = static_cast<int>(total);
      total += start_counts_[p];
    }
    start_texts_.assign(total, '\0');
    req = MPI_REQUEST_NULL;
    if (MPI_Iallgatherv(start_config_.data(), start_counts_[rank], MPI_CHAR, start_texts_.data(),
                        start_counts_.data(), start_displs_.data(), MPI_CHAR, comm_,
                        &req) == MPI_SUCCESS &&
        wait_for_start(&req)) {
      for (int p = 0; p < size; ++p) {
        start.configs[p] = start_texts_.substr(start_displs_[p], start_counts_[p]);
      }
      return start;
    }
  }
  // The request stays pending (a collective cannot be cancelled): its buffers are members.
  start.agreed = false;
  peer_lost_.store(true);  // finalizing could hang
  return start;
}

void MpiProcess::main() {
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  if (g_abandoned.load(std::memory_order_acquire)) return;  // the process is ending without it
  MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(comm_, &rank);
  MPI_Comm_size(comm_, &size);
  JobStart start = agree_on_start(rank, size);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (abandoned_) return;
    provided_ = provided;
    rank_ = rank;
    size_ = size;
    alive_ns_.reset(new std::atomic<int64_t>[size]);
    for (int p = 0; p < size; ++p) alive_ns_[p].store(0);
    beat_buffers_.assign(static_cast<size_t>(size) * kHeaderBytes, std::byte{0});
    beat_requests_.assign(size, MPI_REQUEST_NULL);
    start_ = std::move(start);
    ending_.store(start_.first_failed() >= 0, std::memory_order_release);
    start_done_.store(true, std::memory_order_release);
    started_ = true;
  }
  cv_.notify_all();
  int idle = 0;
  auto idle_since = std::chrono::steady_clock::now();
  while (!stop_.load(std::memory_order_acquire)) {
    MpiLink* link = link_.load(std::memory_order_acquire);
    bool busy = false;
    if (link != nullptr) busy |= link->progress(comm_);
    busy |= beat(link);
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
      if (b.header().kind == WireKind::kAlive && status.MPI_SOURCE >= 0 &&
          status.MPI_SOURCE < size_) {  // a beat, of whatever run: the sender made progress
        alive_ns_[status.MPI_SOURCE].store(steady_ns(), std::memory_order_release);
        recv_pool_.put(b);
      } else if (link != nullptr) {
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
  // A beat to a live process completes at once; one to a lost process never does.
  const auto beats_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  for (MPI_Request& r : beat_requests_) {
    int done = r == MPI_REQUEST_NULL;
    while (!done && MPI_Test(&r, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done &&
           std::chrono::steady_clock::now() < beats_deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    if (!done) peer_lost_.store(true);  // finalizing could hang
  }
  if (!peer_lost_.load()) {
    MPI_Comm_free(&comm_);
    MPI_Finalize();
  }
}

}  // namespace dtsim::mpi
