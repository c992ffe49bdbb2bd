// The process's MPI: one progress thread that makes every MPI call of the process. It
// calls MPI_Init_thread(MPI_THREAD_FUNNELED) itself, so FUNNELED is the level it needs:
// rank threads never call MPI, they hand work to this thread through the lock-free queues
// of an MpiLink (mpi_link.h). It polls while a World is attached, so nonblocking sends
// progress while ranks compute; idle, it backs off to sleeping on a doorbell.
//
// MPI starts on the first MPI World and ends (MPI_Finalize) when the process exits,
// unless a peer process was lost, in which case finalizing could hang and is skipped.
//
// The job's start (runtime/job_start.h): right after MPI_Init the progress thread gathers
// from every process whether it met a usage error and its configuration's text (an
// MPI_Iallgather, then an MPI_Iallgatherv), within
// kStartDeadline of the first instance() call; MPI_Init waits for every process too, so when
// it has not returned by then instance() returns with job_start().agreed false.
//
// Beats: every kBeatEvery, whether or not a World is attached, the progress thread sends a
// header-only kAlive to every other process if this one made progress since the last beat:
// its program's thread (the one that built the latest World, or started MPI) used CPU time,
// or its ranks began calls or left a run (MpiLink::local_progress). The progress thread's
// own work never counts, nor the program thread's polling in a runtime wait (OwnerWaiting),
// so a process that is stopped (SIGSTOP), blocked or stuck in a wait falls silent, while a
// slow one (oversubscribed, still building its World or its data) keeps beating. Every
// received kAlive stamps alive_ns(process), which the start and end of a run wait on.
//
// Termination: mpirun ends a job whose process died by sending SIGTERM to the others
// (then SIGKILL about a second later). In an MPI process a handler turns SIGTERM and
// SIGINT into a failure of the running World, naming where each local rank was and whom
// it waited for, so that ranks abort, output files are discarded as the stack unwinds,
// and the process exits non-zero with that one line; between runs it exits at once.
// Before the start completes a process that met a usage error prints it instead and exits
// 2; once the start ends the job (some process met one) the signal is ignored, since every
// process is exiting 2 already (mpirun sends it when the first of them exits).
//
// Thread safety: instance(), attach(), detach() and the accessors are safe from any thread;
// set_start() only before the first instance().
#pragma once

#include <mpi.h>

#include <time.h>
#include <atomic>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/doorbell.h"
#include "runtime/job_start.h"
#include "runtime/transport/mpi/wire.h"
#include "runtime/transport/mpi/wire_pool.h"

namespace dtsim::mpi {

class MpiLink;

class MpiProcess {
 public:
  // Starts MPI on first use and passes the job's start (blocks until both are done, or up
  // to kStartDeadline and a little more).
  static MpiProcess& instance();
  // What this process brings to the start: 0 or its usage error's hash, the line it prints
  // if a signal ends it before the start completes, and its configuration's text (compared
  // across processes, job_start.h). No effect once MPI started.
  static void set_start(uint64_t error_hash, std::string error_alone, std::string config);
  // The start's outcome, complete once instance() returned.
  const JobStart& job_start() const { return start_; }

  int rank() const { return rank_; }  // in MPI_COMM_WORLD
  int size() const { return size_; }
  int thread_level() const { return provided_; }
  // Each MPI World gets the next number; every process builds its Worlds in the same order.
  uint64_t next_world_number() { return ++worlds_; }

  // Makes `link` the World the progress thread serves (one at a time).
  void attach(MpiLink* link);
  // Waits (up to `timeout`) for the link's sends to complete, then stops serving it; on
  // return the progress thread no longer touches `link`. Returns false if the sends did
  // not complete (their buffers are leaked).
  bool detach(MpiLink* link, std::chrono::milliseconds timeout);
  // A peer process is gone: skip MPI_Finalize at exit.
  void mark_peer_lost() { peer_lost_.store(true); }
  bool peer_lost() const { return peer_lost_.load(); }
  // A termination signal arrived: runs end without waiting for the other processes.
  bool terminating() const { return terminating_.load(std::memory_order_acquire); }
  // Rank threads ring it after queueing work for the progress thread.
  Doorbell& bell() { return bell_; }
  // When `process`'s latest beat arrived (steady_ns), or 0 if none has. Any thread.
  int64_t alive_ns(int process) const {
    return alive_ns_ ? alive_ns_[process].load(std::memory_order_acquire) : 0;
  }
  static int64_t steady_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  // While alive, the program's thread is polling in a runtime wait: its CPU time is not
  // progress. For that thread (the World's owner) only.
  class OwnerWaiting {
   public:
    explicit OwnerWaiting(MpiProcess& p) : p_(p) { p_.owner_waiting_.fetch_add(1); }
    ~OwnerWaiting() { p_.owner_waiting_.fetch_sub(1); }
    OwnerWaiting(const OwnerWaiting&) = delete;
    OwnerWaiting& operator=(const OwnerWaiting&) = delete;

   private:
    MpiProcess& p_;
  };

 private:
  MpiProcess();
  ~MpiProcess();
  void main();
  // The start's collective, after MPI_Init (progress thread).
  JobStart agree_on_start(int rank, int size);
  // Waits for one of the start's requests until the start's deadline; false if it failed.
  bool wait_for_start(MPI_Request* req);
  // Waits for SIGTERM / SIGINT (posted by the handler) and fails the running World.
  void watch_signals();
  // Progress thread: sends a beat if this process made progress since the last one.
  bool beat(MpiLink* link);
  // The calling thread becomes the one whose CPU time counts as progress.
  void set_owner();

  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool started_ = false;
  bool abandoned_ = false;  // MPI_Init outlived the start's deadline: the thread is let go
  std::chrono::steady_clock::time_point start_deadline_;
  uint64_t start_error_ = 0;  // set_start()'s
  std::string start_alone_;
  std::string start_config_;
  JobStart start_;                       // written before started_ is set, then read-only
  std::atomic<bool> start_done_{false};  // start_ is complete
  std::atomic<bool> ending_{false};      // the start ends the job: every process exits 2
  std::atomic<bool> stop_{false};
  std::atomic<bool> peer_lost_{false};
  std::atomic<bool> terminating_{false};
  std::thread signal_thread_;
  std::atomic<MpiLink*> link_{nullptr};
  std::atomic<MpiLink*> detaching_{nullptr};
  std::atomic<bool> detached_{false};
  std::atomic<bool> abandon_{false};  // detach timed out: let go of the link undrained
  int rank_ = 0;
  int size_ = 1;
  int provided_ = 0;
  uint64_t worlds_ = 0;
  Doorbell bell_;
  std::atomic<clockid_t> owner_clock_{0};
  std::atomic<bool> owner_known_{false};
  std::atomic<int> owner_waiting_{0};
  std::unique_ptr<std::atomic<int64_t>[]> alive_ns_;  // per process; set before started_
  // progress thread only
  std::chrono::steady_clock::time_point beat_checked_{};
  int64_t owner_cpu_ = -1;
  uint64_t link_progress_ = 0;
  std::vector<std::byte> beat_buffers_;  // kHeaderBytes per process, alive while its send is
  std::vector<MPI_Request> beat_requests_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  std::vector<WireBuf> future_;
  // The start's buffers, alive as long as its requests may be.
  std::vector<uint64_t> start_send_;
  std::vector<uint64_t> start_recv_;
  std::vector<int> start_counts_;
  std::vector<int> start_displs_;
  std::string start_texts_;
  WirePool recv_pool_;
};

}  // namespace dtsim::mpi
