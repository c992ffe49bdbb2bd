// One World's connection to the other processes of an MPI job: the queues between this
// process's rank threads and the MPI progress thread (mpi_process.h), and the per-run
// protocol between processes (abort, end of run).
//
// Data path, all lock-free single-producer single-consumer queues, no allocation once
// warm: a rank copies a send into a pooled wire buffer and pushes it on its `out` queue;
// the progress thread MPI_Isends it and hands the buffer back on `spare`. The progress
// thread receives every message (MPI_Improbe + MPI_Mrecv, so no MPI_ANY_SOURCE race) into
// its own pool and pushes it on the destination rank's `in` queue, ringing its doorbell;
// the rank matches on (source, key) with a stash, and release() returns the buffer on
// `returned`.
//
// Runs: every message carries the epoch (world number, run number); a message of an
// earlier run is dropped, one of a later run waits until this process gets there. A run
// begins on every process together: each tells every other (kBegin) and waits for them, so
// no rank waits on a process that is still getting ready (building its World, its data).
// At the end of a run every process tells every other (kDone) and waits for them. Both
// waits have the World's deadline, counted from the missing process's latest sign of
// progress (MpiProcess's beats): a process that never reports and makes no progress
// (killed, stopped, blocked) is named in the error.
// A rank that fails makes the progress thread send kAbort with its error to every process,
// whose ranks then throw AbortedError and whose World::run names the failed rank.
//
// Thread safety: queues(i) belongs to local rank i (one producer and one consumer per
// queue); begin_run/finish_run are called by the World's owner thread between runs;
// everything under "progress thread" only by MpiProcess's thread.
#pragma once

#include <mpi.h>

#include <atomic>
#include <boost/lockfree/spsc_queue.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "runtime/doorbell.h"
#include "runtime/native_collectives.h"
#include "runtime/process_model.h"
#include "runtime/transport/mpi/wire.h"
#include "runtime/transport/mpi/wire_pool.h"

namespace dtsim {
class RunState;
}

namespace dtsim::mpi {

class MpiLink {
 public:
  static constexpr size_t kQueueDepth = 1024;
  template <size_t N>
  using Queue = boost::lockfree::spsc_queue<WireBuf, boost::lockfree::capacity<N>>;
  struct alignas(64) RankQueues {
    Queue<kQueueDepth> out;       // rank -> progress thread: to send
    Queue<kQueueDepth> in;        // progress thread -> rank: received, this run
    Queue<kQueueDepth> spare;     // progress thread -> rank: sent buffers, for reuse
    Queue<kQueueDepth> returned;  // rank -> progress thread: released receive buffers
  };

  // Attaches to the process's MPI progress thread (starting MPI if needed). `model` must
  // be an MPI model whose processes and process index match MPI_COMM_WORLD.
  MpiLink(RunState* state, const ProcessModel& model, std::chrono::milliseconds timeout);
  // Waits (up to the deadline) for this World's sends to complete, then detaches.
  ~MpiLink();
  MpiLink(const MpiLink&) = delete;
  MpiLink& operator=(const MpiLink&) = delete;

  const ProcessModel& model() const { return model_; }
  RunState* state() const { return state_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  RankQueues& queues(int local) { return queues_[local]; }
  uint64_t epoch() const { return epoch_.load(std::memory_order_acquire); }
  // Rank threads ring it after pushing a send, so an idle progress thread wakes at once.
  Doorbell& progress_bell() { return *progress_bell_; }

  // World's owner, before the rank threads start a run: tells every other process and
  // waits for all of them, up to the deadline after a missing one's latest beat. Returns ""
  // or a one-line error naming the processes that did not begin (*lost_rank as below).
  std::string begin_run(int* lost_rank);
  // World's owner, after every local rank left the run: tells every other process and
  // waits for all of them: up to the deadline plus a few seconds (a peer blocked on a
  // missing message fails at its deadline, then reports), or a few seconds when this run
  // already failed (the others then only have to see the abort). A peer that made progress
  // (a beat, MpiProcess::alive_ns) is waited for until that long after its latest beat,
  // so a slow (oversubscribed) process is not taken for a lost one. Returns "" or a one-line error
  // naming the processes (and their ranks) that did not report; *lost_rank: the first
  // rank of the first of them.
  std::string finish_run(bool failed, int* lost_rank);

  // Algo::kMpi (one rank per process): the rank posts one call at a time; the progress
  // thread starts it as a nonblocking MPI collective and marks it done.
  enum NativeState : int { kIdle, kPosted, kRunning, kDone };
  void post_native(const NativeCall* call);
  int native_state() const { return native_state_.load(std::memory_order_acquire); }
  void clear_native() { native_state_.store(kIdle, std::memory_order_release); }

  // ---- progress thread ----
  // One round of work: sends, completions, receives, aborts, end-of-run messages.
  // Returns true if it did anything.
  bool progress(MPI_Comm comm);
  // Delivers a received message (or keeps it for a later run). Takes ownership of `b`.
  void dispatch(WireBuf b);
  // What this process's ranks did in the run so far (calls begun, ranks that left it): the
  // beats count a change as progress.
  uint64_t local_progress() const;
  // True when every send of this World has completed.
  bool drained() const { return sends_.empty(); }
  // Buffers of runs not yet begun, shared across Worlds: owned by MpiProcess.
  std::vector<WireBuf>* future = nullptr;
  WirePool* recv_pool = nullptr;

 private:
  void post_send(MPI_Comm comm, WireBuf b, int owner);
  void send_control(MPI_Comm comm, WireKind kind, int src, const std::string& text);
  // Waits until every other process's kBegin/kDone (`seen`) reached epoch `e`, or the
  // deadline `wait` after the later of now and its latest beat; "" or the missing ones.
  std::string wait_for_all(const std::atomic<uint64_t>* seen, uint64_t e,
                           std::chrono::milliseconds wait, int* lost_rank, const char* what);
  bool progress_native(MPI_Comm comm);

  RunState* state_;
  ProcessModel model_;
  std::chrono::milliseconds timeout_;
  uint64_t world_number_;
  std::unique_ptr<RankQueues[]> queues_;
  std::atomic<uint64_t> epoch_{0};
  Doorbell* progress_bell_;  // MpiProcess's
  // World owner -> progress thread: the epoch whose kDone this process should send.
  std::atomic<uint64_t> finish_epoch_{0};
  // Progress thread -> World owner: kDone received this run, per process.
  std::unique_ptr<std::atomic<uint64_t>[]> done_epoch_;
  // Progress thread -> World owner: the epoch whose kDone this process has sent.
  std::atomic<uint64_t> done_sent_epoch_{0};
  // Progress thread -> World owner: kBegin received, per process.
  std::unique_ptr<std::atomic<uint64_t>[]> begin_epoch_;

  // progress thread only
  struct PendingSend {
    WireBuf buf;
    int owner;  // local rank whose pool it returns to, or -1 (progress thread's)
  };
  std::vector<MPI_Request> requests_;
  std::vector<int> completed_;  // MPI_Testsome's indices
  std::vector<PendingSend> sends_;
  std::vector<std::vector<WireBuf>> overflow_;  // per local rank, when its `in` is full
  uint64_t seen_epoch_ = 0;
  uint64_t abort_sent_epoch_ = 0;
  WirePool control_pool_;
  std::atomic<const NativeCall*> native_call_{nullptr};
  std::atomic<int> native_state_{kIdle};
  MPI_Request native_req_ = MPI_REQUEST_NULL;
  std::vector<int> native_counts_, native_displs_;
};

}  // namespace dtsim::mpi
