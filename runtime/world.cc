#include "runtime/world.h"

#include <pthread.h>
#include <sched.h>

#include <string>
#include <system_error>

#include "runtime/communicator.h"
#include "runtime/controller.h"
#include "runtime/diagnostics/watchdog.h"
#include "runtime/planted.h"
#include "runtime/rank_context.h"
#include "runtime/run_state.h"
#include "runtime/transport/plugin.h"
#include "runtime/transport/routed_transport.h"

namespace dtsim {
namespace {
// How many of each rank's most recent collectives a RankFailure reports.
constexpr size_t kFailureReportCalls = 4;

// Pins the calling thread to the (k mod count)-th CPU of the process's affinity mask.
void bind_to_cpu(int k) {
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return;
  const int count = CPU_COUNT(&allowed);
  if (count == 0) return;
  int want = k % count;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &allowed) || want-- > 0) continue;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    pthread_setaffinity_np(pthread_self(), sizeof one, &one);
    return;
  }
}
}  // namespace

RankFailure::RankFailure(int rank, std::exception_ptr cause, const std::string& what)
    : Error("rank " + std::to_string(rank) + ": " + what), rank_(rank), cause_(std::move(cause)) {}

World::World(int size, WorldOptions options) : World(ProcessModel::threads_only(size), options) {}

World::World(ProcessModel model, WorldOptions options) : model_(model) {
  // Each plug-in may complete the layout (MPI fills in the job's processes) or refuse it.
  std::vector<const TransportPlugin*> joined;
  for (const TransportPlugin* p : transport_plugins()) {
    if (p->joins(model_, options)) joined.push_back(p);
  }
  size_ = model_.world_size();
  if (size_ < 1 || size_ > kMaxRanks) {
    throw UsageError("world size " + std::to_string(size_) + " is out of range; use 1 to " +
                     std::to_string(kMaxRanks) + " ranks");
  }
  state_ = std::make_unique<RunState>(size_, options);
  for (const TransportPlugin* p : joined) domains_.push_back(p->open(*state_, model_));
  connect(options);
  watchdog_ = std::make_unique<Watchdog>(state_.get());
  threads_.reserve(model_.threads);
  try {
    for (int r = first_rank(); r < first_rank() + model_.threads; ++r) {
      threads_.emplace_back([this, r] { rank_main(r); });
    }
  } catch (const std::system_error& e) {
    const size_t started = threads_.size();
    stop_threads();
    throw Error("could not start rank thread " + std::to_string(started) + " of " +
                std::to_string(model_.threads) + " (" + e.what() +
                "); use fewer ranks or raise the process's thread or memory limit (ulimit -u, "
                "ulimit -v)");
  }
}

void World::connect(const WorldOptions& options) {
  // Each peer goes to the first domain that reaches it; a domain that reaches no peer
  // gives the ranks no endpoint.
  std::vector<int> route(size_, -1);
  for (int peer = 0; peer < size_; ++peer) {
    for (size_t d = 0; d < domains_.size() && route[peer] < 0; ++d) {
      if (domains_[d]->reaches(peer)) route[peer] = static_cast<int>(d);
    }
    if (route[peer] < 0) {
      throw Error("no transport reaches rank " + std::to_string(peer) + " of " + model_.describe());
    }
  }
  std::vector<int> used;  // domain -> endpoint index, or -1
  std::vector<int> slot(domains_.size(), -1);
  for (int d : route) {
    if (slot[d] < 0) slot[d] = static_cast<int>(used.size()), used.push_back(d);
  }
  std::vector<int> by_endpoint(size_);
  for (int peer = 0; peer < size_; ++peer) by_endpoint[peer] = slot[route[peer]];
  for (int r = first_rank(); r < first_rank() + model_.threads; ++r) {
    auto ctx = std::make_unique<RankContext>();
    ctx->rank = r;
    std::vector<std::unique_ptr<Transport>> endpoints;
    for (int d : used) endpoints.push_back(domains_[d]->make_transport(r));
    ctx->transport = endpoints.size() == 1
                         ? std::move(endpoints[0])
                         : std::make_unique<RoutedTransport>(std::move(endpoints), by_endpoint);
    for (size_t d = 0; d < domains_.size() && !ctx->native; ++d) {
      ctx->native = domains_[d]->make_native(r);
    }
    ctx->world_features = model_.world_features();  // e.g. whether Algo::kMpi runs here
    ctx->tracing = options.trace;
    ctx->lend_bytes = options.lend_bytes;
    ctx->planted = options.planted;
    ctx->recorder = &state_->recorder(r);
    contexts_.push_back(std::move(ctx));
  }
}

World::~World() { stop_threads(); }

void World::stop_threads() {
  stopping_ = true;
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  for (auto& t : threads_) t.join();
  threads_.clear();
  contexts_.clear();  // the transports, before their domains
  domains_.clear();   // before state_: MPI's progress thread rings the ranks' doorbells
}

RankContext& World::context(int rank) const {
  if (!is_local(rank) || rank < 0 || rank >= size_) {
    throw UsageError("rank " + std::to_string(rank) + " is not a rank of this process (" +
                     model_.describe() + ", this process runs ranks " +
                     std::to_string(first_rank()) + ".." +
                     std::to_string(first_rank() + model_.threads - 1) + ")");
  }
  return *contexts_[rank - first_rank()];
}

const WorldOptions& World::options() const { return state_->options(); }
size_t World::payload_bytes() const {
  size_t bytes = 0;
  for (const auto& d : domains_) bytes += d->payload_bytes();
  return bytes;
}
const RankCounters& World::counters(int rank) const { return context(rank).counters; }
const RankTrace& World::trace(int rank) const { return context(rank).trace; }
std::vector<FlightEntry> World::flight_record(int rank) const {
  return state_->recorder(context(rank).rank).entries();
}
std::string World::desync_report() const { return dtsim::desync_report(*state_); }

std::string World::flight_report(size_t last) const {
  std::string out = "flight recorder (last " + std::to_string(last) + " collectives per rank):";
  for (int r = first_rank(); r < first_rank() + model_.threads; ++r) {
    const std::vector<FlightEntry> calls = flight_record(r);
    out += "\n  rank " + std::to_string(r) + ":";
    if (calls.empty()) out += " no collective called";
    const size_t first = calls.size() > last ? calls.size() - last : 0;
    for (size_t i = first; i < calls.size(); ++i) out += "\n    " + describe(calls[i]);
  }
  return out;
}

void World::rank_main(int rank) {
  if (state_->options().bind_to_cores) bind_to_cpu(rank);
  uint64_t seen = 0;
  for (;;) {
    generation_.wait(seen, std::memory_order_acquire);
    seen = generation_.load(std::memory_order_acquire);
    if (stopping_) return;
    FlightRecorder& recorder = state_->recorder(rank);
    schedule::Controller* sched = state_->options().scheduler;
    if (sched) sched->enter(rank);
    try {
      Communicator world(
          &context(rank), 1,
          [&] {
            std::vector<int> all(size_);
            for (int r = 0; r < size_; ++r) all[r] = r;
            return all;
          }(),
          "world");
      recorder.set_phase(RankPhase::kRunning);
      (*job_)(world);
      // Ranks blocked on this one re-check: a rank that returned will send nothing more.
      recorder.set_phase(RankPhase::kFinished);
      for (int r = first_rank(); r < first_rank() + model_.threads; ++r) state_->bell(r).ring();
    } catch (...) {
      recorder.set_phase(RankPhase::kFailed);
      state_->fail(rank, std::current_exception());
      // fail() rings only for the first failure; a rank waiting on this one (a lender in
      // settle()) must see it leave either way.
      for (int r = first_rank(); r < first_rank() + model_.threads; ++r) state_->bell(r).ring();
    }
    if (sched) sched->leave(rank);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_all();
  }
}

void World::run(const std::function<void(Communicator&)>& fn) {
  for (auto& ctx : contexts_) {
    ctx->counters = RankCounters{};
    ctx->trace.clear();
    state_->recorder(ctx->rank).reset();
  }
  schedule::Controller* sched = state_->options().scheduler;
  // Under the controlled scheduler the scheduler runs the watchdog's check itself, at
  // deadlocks, so that the outcome of a schedule does not depend on time (watchdog.h).
  watchdog_->set_active(sched == nullptr);
  if (sched) sched->begin_run(state_.get(), state_->options().timeout);
  for (auto& d : domains_) {
    int lost_rank = -1;
    const std::string gone = d->begin_run(&lost_rank);
    if (gone.empty()) continue;
    // A process never reached the run: no rank starts it.
    watchdog_->set_active(false);
    for (auto& e : domains_) e->end_run();
    state_->reset();
    throw RankFailure(lost_rank, std::make_exception_ptr(TimeoutError(gone)), gone);
  }
  job_ = &fn;
  pending_.store(model_.threads, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  for (int left = pending_.load(); left != 0; left = pending_.load(std::memory_order_acquire)) {
    pending_.wait(left, std::memory_order_acquire);
  }
  watchdog_->set_active(false);
  // Every process waits for every other to leave the run (or names the one it lost).
  // A failed run names the process it lost too: a rank that timed out may name a peer that
  // itself waited, transitively, on the lost one.
  std::string lost;
  for (auto& d : domains_) {
    int lost_rank = -1;
    const std::string gone = d->finish_run(state_->aborted(), &lost_rank);
    if (gone.empty()) continue;
    if (!state_->aborted()) {
      state_->fail(lost_rank, std::make_exception_ptr(TimeoutError(gone)));
    } else {
      lost += (lost.empty() ? "" : "; ") + gone;
    }
  }
  int failed = state_->failed_rank();
  std::exception_ptr cause = state_->failure();
  std::string what;
  std::string flight;
  if (!cause) {
    // A message left unreceived means a rank skipped or changed a call that only sent to
    // it, which no receive could notice: the run is wrong even though every rank returned.
    int receiver = -1;
    std::string undelivered;
    for (size_t d = 0; d < domains_.size() && undelivered.empty(); ++d) {
      undelivered = domains_[d]->undelivered_report(&receiver);
    }
    if (!undelivered.empty()) {
      failed = receiver;
      cause = std::make_exception_ptr(MismatchError(undelivered));
      what = std::to_string(receiver) + " failed: " + undelivered;
      flight = flight_report(kFailureReportCalls);
    }
  } else {
    what = state_->abort_reason().substr(std::string("rank ").size());
    if (!lost.empty()) what += "; " + lost;
    flight = flight_report(kFailureReportCalls);
  }
  if (cause && sched) flight += "\n" + sched->summary(32);
  for (auto& d : domains_) d->end_run();
  state_->reset();
  if (cause) {
    const std::string prefix = std::to_string(failed) + " failed: ";
    RankFailure failure(failed, cause, what.substr(prefix.size()));
    failure.set_flight_report(std::move(flight));
    throw failure;
  }
}

}  // namespace dtsim
