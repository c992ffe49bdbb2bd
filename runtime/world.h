// A World is N rank threads that live as long as it does. run(fn) calls fn(world_comm) on
// every rank, waits for all of them, and rethrows the first failure with its rank.
//
// Thread safety: run() is called from one (non-rank) thread at a time.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "runtime/diagnostics/counters.h"
#include "runtime/diagnostics/flight_recorder.h"
#include "runtime/diagnostics/trace.h"
#include "runtime/process_model.h"
#include "runtime/types.h"

namespace dtsim {

class Communicator;
class RunState;
class TransportDomain;
class Watchdog;
struct PlantedBug;
struct RankContext;
namespace schedule {
class Controller;
}

struct WorldOptions {
  // Deadline of every blocking wait in the runtime: a wait that sees no progress (its
  // message, its release, room in a mailbox or in the budget) for this long throws
  // TimeoutError. It bounds each wait, not a whole call: a collective that keeps making
  // progress may take longer. milliseconds::max() waits forever.
  std::chrono::milliseconds timeout{60000};
  // World-wide bound on the bytes of pooled message payloads (copies of sent data larger
  // than 16 bytes, in flight, stashed or cached for reuse). A send that does not fit waits
  // for receivers to free some (flow control) up to `timeout`; a single message larger
  // than the whole budget fails at once.
  size_t max_bytes_in_flight = kDefaultMaxBytesInFlight;
  static constexpr size_t kDefaultMaxBytesInFlight = size_t{1} << 30;
  // Record the lockstep trace (trace.h): every send and every rank's buffer after each step.
  bool trace = false;
  // Stress: seeded random yields and sleeps of up to jitter_us around sends and receives.
  uint32_t jitter_us = 0;
  uint64_t jitter_seed = 0;
  // Breaks the snapshot rule on purpose: a send hands the receiver a pointer to the
  // sender's live buffer instead of a copy. Only for proving that `dtsim stress` catches it.
  bool unsafe_live_sends = false;
  // Busy-poll iterations before a waiting rank yields, then sleeps. -1: pick from the
  // ratio of ranks to cores (spin only when every rank can have a core).
  int spin = -1;
  // Ring collectives lend chunks of at least this many bytes instead of copying them
  // (Exchange::send_or_lend): the receiver reads the sender's buffer in place, one copy
  // instead of two. SIZE_MAX turns lending off; `dtsim stress` also runs it at 64 bytes.
  size_t lend_bytes = kDefaultLendBytes;
  static constexpr size_t kDefaultLendBytes = size_t{64} << 10;
  // Pin rank r's thread to the r-th CPU this process may use (mod their number), like
  // `mpirun --bind-to core`. Off by default; the benchmarks turn it on when every rank
  // gets a core of its own, as mpirun does, so that the scheduler cannot stack two
  // spinning ranks on one core in the middle of a measurement.
  bool bind_to_cores = false;
  // Controlled scheduling (runtime/schedule/scheduler.h): one rank thread runs at a time
  // and this scheduler, borrowed for the World's life, picks which at every send, receive
  // and settle. nullptr (the default): the ranks run freely and the hooks cost one branch.
  schedule::Controller* scheduler = nullptr;
  // A bug planted on purpose (planted.h; test and stress binaries only), to measure that
  // stress testing finds it. Borrowed for the World's life; nullptr: none.
  const PlantedBug* planted = nullptr;
};

// Thrown by World::run: the first rank that failed, and what it threw.
class RankFailure : public Error {
 public:
  RankFailure(int rank, std::exception_ptr cause, const std::string& what);
  int rank() const { return rank_; }
  const std::exception_ptr& cause() const { return cause_; }
  // Every rank's last collectives from the flight recorder, as they stood at the failure:
  // several lines, for the error report (what() stays the one-line original error).
  const std::string& flight_report() const { return flight_report_; }
  void set_flight_report(std::string report) { flight_report_ = std::move(report); }

 private:
  int rank_;
  std::exception_ptr cause_;
  std::string flight_report_;
};

class World {
 public:
  // The largest world: its N^2 mailbox channels take about 3.5 KiB each (0.9 GB at 512).
  static constexpr int kMaxRanks = 512;
  // Starts `size` rank threads (1 <= size <= kMaxRanks); throws UsageError otherwise, and
  // Error if the system cannot start that many threads (after joining those it started).
  explicit World(int size, WorldOptions options = {});
  // A World laid out as `model` says (process_model.h): in an MPI model, every process of
  // the job builds its World with the same model and options, in the same order, and calls
  // run() the same number of times; this process runs ranks [first_rank(), + threads).
  // Starts MPI on the first MPI World, which passes the job's start (job_start.h) if the
  // program did not: JobRefused if another process met a usage error there. UsageError if
  // the model does not match the job.
  explicit World(ProcessModel model, WorldOptions options = {});
  ~World();
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  int size() const { return size_; }
  const ProcessModel& model() const { return model_; }
  // Ranks of this process: [first_rank(), first_rank() + model().threads).
  int first_rank() const { return model_.first_rank(); }
  bool is_local(int rank) const { return model_.is_local(rank); }
  const WorldOptions& options() const;
  // Bytes of pooled payload buffers alive now (0 between runs: each run returns them).
  size_t payload_bytes() const;

  // Runs fn on every rank of this process with that rank's world communicator; throws
  // RankFailure if any rank (of any process) threw, if a process was lost, or if a message
  // was sent and never received (a rank skipped a call or called a different one; the error
  // names both ranks and both calls). Counters and traces describe the last run. The
  // per-rank accessors below take ranks of this process (UsageError otherwise).
  void run(const std::function<void(Communicator&)>& fn);

  const RankCounters& counters(int rank) const;
  const RankTrace& trace(int rank) const;
  // Rank's last FlightRecorder::kDepth collectives (oldest first) in the last run.
  std::vector<FlightEntry> flight_record(int rank) const;
  // Per rank: last completed collective and where it is now (watchdog.h), for reports.
  std::string desync_report() const;
  // Every rank's `last` most recent collectives, one per line (for error reports).
  std::string flight_report(size_t last) const;

 private:
  // Opens the plug-ins' domains and gives each local rank its transport.
  void connect(const WorldOptions& options);
  void rank_main(int rank);
  RankContext& context(int rank) const;
  void stop_threads();

  ProcessModel model_;
  int size_;
  std::unique_ptr<RunState> state_;
  // The transport plug-ins that take part (transport/plugin.h), in routing order.
  std::vector<std::unique_ptr<TransportDomain>> domains_;
  std::vector<std::unique_ptr<RankContext>> contexts_;
  std::unique_ptr<Watchdog> watchdog_;  // service thread; reads state_'s recorders
  std::vector<std::thread> threads_;
  const std::function<void(Communicator&)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  bool stopping_ = false;
};

}  // namespace dtsim
