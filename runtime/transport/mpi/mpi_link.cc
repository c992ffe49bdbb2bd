#include "runtime/transport/mpi/mpi_link.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <thread>

#include "runtime/payload.h"
#include "runtime/reduce_kernels.h"
#include "runtime/run_state.h"
#include "runtime/split.h"
#include "runtime/transport/mpi/mpi_process.h"

namespace dtsim::mpi {
namespace {
// After a failure the live processes see the abort within milliseconds; one that has not
// reported after this long is gone.
constexpr std::chrono::milliseconds kFailedRunGrace{3000};
// Waits this long or longer (milliseconds::max() is "never") are endless: no overflow.
constexpr std::chrono::milliseconds kEndless = std::chrono::hours(24 * 365 * 100);
}  // namespace

WireBuf allocate_wire(size_t payload_bytes) {
  const PayloadBuffer p = allocate_payload(kHeaderBytes + payload_bytes);
  return {p.data, p.capacity};
}

void free_wire(WireBuf b) { free_payload({b.data, b.capacity}); }

MpiLink::MpiLink(RunState* state, const ProcessModel& model, std::chrono::milliseconds timeout)
    : state_(state),
      model_(model),
      timeout_(timeout),
      world_number_(MpiProcess::instance().next_world_number()),
      queues_(new RankQueues[model.threads]),
      progress_bell_(&MpiProcess::instance().bell()),
      done_epoch_(new std::atomic<uint64_t>[model.processes]),
      begin_epoch_(new std::atomic<uint64_t>[model.processes]),
      overflow_(model.threads) {
  for (int p = 0; p < model.processes; ++p) {
    done_epoch_[p].store(0);
    begin_epoch_[p].store(0);
  }
  epoch_.store(world_number_ << 32, std::memory_order_release);
  MpiProcess::instance().attach(this);
}

MpiLink::~MpiLink() {
  MpiProcess& process = MpiProcess::instance();
  process.detach(this, process.peer_lost() ? std::chrono::milliseconds(100) : timeout_);
  for (int i = 0; i < model_.threads; ++i) {
    RankQueues& q = queues_[i];
    WireBuf b;
    while (q.out.pop(b)) free_wire(b);
    while (q.in.pop(b)) free_wire(b);
    while (q.spare.pop(b)) free_wire(b);
    while (q.returned.pop(b)) free_wire(b);
  }
  for (auto& list : overflow_) {
    for (WireBuf b : list) free_wire(b);
  }
}

std::string MpiLink::begin_run(int* lost_rank) {
  epoch_.fetch_add(1, std::memory_order_acq_rel);
  progress_bell_->ring_always();
  if (model_.processes == 1) return "";
  return wait_for_all(begin_epoch_.get(), epoch(), timeout_, lost_rank,
                      "did not begin the run (no start-of-run message)");
}

std::string MpiLink::finish_run(bool failed, int* lost_rank) {
  const uint64_t e = epoch();
  finish_epoch_.store(e, std::memory_order_release);
  progress_bell_->ring_always();
  // A live process still in the run fails at its deadline at the latest, then reports.
  const auto wait = failed ? std::min<std::chrono::milliseconds>(timeout_, kFailedRunGrace)
                           : std::min(timeout_, kEndless) + kFailedRunGrace;
  return wait_for_all(done_epoch_.get(), e, wait, lost_rank, "no end-of-run message");
}

std::string MpiLink::wait_for_all(const std::atomic<uint64_t>* seen, uint64_t e,
                                  std::chrono::milliseconds wait, int* lost_rank,
                                  const char* what) {
  MpiProcess& process = MpiProcess::instance();
  const int64_t wait_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::min(wait, kEndless)).count();
  const int64_t deadline = MpiProcess::steady_ns() + wait_ns;
  if (process.terminating()) return "";  // the job is ending: nobody reports
  // This thread's polling is no progress of its program's: its beats pause meanwhile.
  const MpiProcess::OwnerWaiting waiting(process);
  auto nap = std::chrono::microseconds(2);
  for (;;) {
    // Our own kDone must be out too: the next run's epoch would make it unsendable.
    bool all = seen != done_epoch_.get() || done_sent_epoch_.load(std::memory_order_acquire) == e;
    int64_t until = deadline;  // a missing peer that made progress lately gets longer
    for (int p = 0; p < model_.processes; ++p) {
      if (p == model_.process || seen[p].load(std::memory_order_acquire) == e) continue;
      all = false;
      const int64_t alive = process.alive_ns(p);
      if (alive != 0) until = std::max(until, alive + wait_ns);
    }
    if (all) return "";
    if (process.terminating()) return "";
    if (MpiProcess::steady_ns() >= until) break;
    std::this_thread::sleep_for(nap);
    nap = std::min(nap * 2, std::chrono::microseconds(500));
  }
  std::string missing;
  for (int p = 0; p < model_.processes; ++p) {
    if (p == model_.process || seen[p].load() == e) continue;
    if (!missing.empty()) missing += ", ";
    const int first = p * model_.threads;
    if (missing.empty()) *lost_rank = first;
    missing += "process " + std::to_string(p) + " (rank" +
               (model_.threads == 1 ? " " + std::to_string(first)
                                    : "s " + std::to_string(first) + "-" +
                                          std::to_string(first + model_.threads - 1)) +
               ")";
  }
  process.mark_peer_lost();
  char waited[32];
  std::snprintf(waited, sizeof waited, "%.1f s", wait.count() / 1000.0);
  return "lost " + missing + ": " + what + ", and no sign of progress, within " + waited +
         "; that process was killed, crashed, stopped or is stuck";
}

uint64_t MpiLink::local_progress() const {
  uint64_t progress = 0;
  for (int r = model_.first_rank(); r < model_.first_rank() + model_.threads; ++r) {
    const FlightRecorder& rec = state_->recorder(r);
    progress += rec.calls() + (rec.phase() == RankPhase::kRunning ? 0 : 1);
  }
  return progress;
}

void MpiLink::post_send(MPI_Comm comm, WireBuf b, int owner) {
  const int dst_process =
      b.header().kind == WireKind::kData ? model_.process_of(b.header().dst) : b.header().dst;
  MPI_Request req;
  MPI_Isend(b.data, static_cast<int>(b.wire_bytes()), MPI_BYTE, dst_process, 0, comm, &req);
  requests_.push_back(req);
  sends_.push_back({b, owner});
}

void MpiLink::send_control(MPI_Comm comm, WireKind kind, int src, const std::string& text) {
  for (int p = 0; p < model_.processes; ++p) {
    if (p == model_.process) continue;
    WireBuf b = control_pool_.take(text.size());
    WireHeader& h = b.header();
    h = WireHeader{};
    h.epoch = epoch();
    h.kind = kind;
    h.src = src;
    h.dst = p;  // a process, for control messages
    h.size = text.size();
    std::memcpy(b.payload(), text.data(), text.size());
    post_send(comm, b, -1);
  }
}

void MpiLink::dispatch(WireBuf b) {
  const WireHeader& h = b.header();
  const uint64_t now = epoch();
  if (h.epoch < now) {  // a run that is over: nobody waits for it
    recv_pool->put(b);
    return;
  }
  if (h.epoch > now) {  // a peer process is already in a later run
    future->push_back(b);
    return;
  }
  // A header from a process that laid the world out otherwise (another rank-thread count)
  // must not index this process's queues: the run fails, naming the mismatch.
  const int ranks = model_.world_size();
  const bool in_range =
      h.src >= 0 && h.src < ranks &&
      (h.kind != WireKind::kData || (h.dst >= 0 && h.dst < ranks && model_.is_local(h.dst)));
  if (!in_range) {
    recv_pool->put(b);
    state_->fail(
        model_.first_rank(),
        std::make_exception_ptr(Error(
            "a message from rank " + std::to_string(h.src) + " to rank " + std::to_string(h.dst) +
            " does not fit this process's world (" + model_.describe() +
            "): the processes disagree on the world's shape; start every process "
            "with the same --threads-per-process")));
    return;
  }
  switch (h.kind) {
    case WireKind::kData: {
      const int local = h.dst - model_.first_rank();
      std::vector<WireBuf>& held = overflow_[local];
      if (!held.empty() || !queues_[local].in.push(b)) held.push_back(b);
      state_->bell(h.dst).ring();
      break;
    }
    case WireKind::kAbort:
      state_->fail(h.src, std::make_exception_ptr(Error(
                              std::string(reinterpret_cast<const char*>(b.payload()), h.size))));
      recv_pool->put(b);
      break;
    case WireKind::kDone:
      done_epoch_[model_.process_of(h.src)].store(h.epoch, std::memory_order_release);
      recv_pool->put(b);
      break;
    case WireKind::kBegin:
      begin_epoch_[model_.process_of(h.src)].store(h.epoch, std::memory_order_release);
      recv_pool->put(b);
      break;
    default:  // a kind this build does not know: from another program
      recv_pool->put(b);
      break;
  }
}

namespace {
MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::kFloat32:
      return MPI_FLOAT;
    case DType::kFloat64:
      return MPI_DOUBLE;
    case DType::kInt32:
      return MPI_INT32_T;
    case DType::kInt64:
      return MPI_INT64_T;
    default:
      return MPI_BYTE;  // bfloat16 is refused before it gets here
  }
}
// Max and min run dtsim's own kernels (reduce_kernels.h) as user-defined MPI operations, so
// that Algo::kMpi gives the same bits as every other algorithm: a NaN anywhere gives NaN
// and max(-0, +0) is +0 (min: -0), where MPI_MAX / MPI_MIN leave both to the library's
// comparison. The kernels are commutative, which MPI may then use.
template <ReduceOp kOp>
void dtsim_op(void* in, void* inout, int* len, MPI_Datatype* type) {
  DType t = DType::kInt64;
  if (*type == MPI_FLOAT) {
    t = DType::kFloat32;
  } else if (*type == MPI_DOUBLE) {
    t = DType::kFloat64;
  } else if (*type == MPI_INT32_T) {
    t = DType::kInt32;
  }
  reducer_for(t, kOp).reduce(inout, in, static_cast<size_t>(*len));
}

MPI_Op mpi_op(ReduceOp op) {
  // Created on the progress thread's first max or min (after MPI_Init), freed by
  // MPI_Finalize.
  static const MPI_Op kMax = [] {
    MPI_Op o;
    MPI_Op_create(&dtsim_op<ReduceOp::kMax>, 1, &o);
    return o;
  }();
  static const MPI_Op kMin = [] {
    MPI_Op o;
    MPI_Op_create(&dtsim_op<ReduceOp::kMin>, 1, &o);
    return o;
  }();
  switch (op) {
    case ReduceOp::kMax:
      return kMax;
    case ReduceOp::kMin:
      return kMin;
    default:
      return MPI_SUM;  // kAvg: the communicator divides afterwards
  }
}
}  // namespace

void MpiLink::post_native(const NativeCall* call) {
  native_call_.store(call, std::memory_order_relaxed);
  native_state_.store(kPosted, std::memory_order_release);
  progress_bell_->ring();
}

bool MpiLink::progress_native(MPI_Comm comm) {
  const int state = native_state_.load(std::memory_order_acquire);
  if (state == kRunning) {
    int done = 0;
    MPI_Test(&native_req_, &done, MPI_STATUS_IGNORE);
    if (!done) return false;
    native_state_.store(kDone, std::memory_order_release);
    state_->bell(model_.first_rank()).ring();
    return true;
  }
  if (state != kPosted) return false;
  const NativeCall& c = *native_call_.load(std::memory_order_relaxed);
  const MPI_Datatype type = mpi_type(c.dtype);
  const int n = static_cast<int>(c.count);
  const size_t p = static_cast<size_t>(model_.processes);
  native_counts_.resize(p);
  native_displs_.resize(p);
  for (size_t i = 0; i < p; ++i) {
    native_counts_[i] = static_cast<int>(split_size(c.count, p, i));
    native_displs_[i] = static_cast<int>(split_offset(c.count, p, i));
  }
  const int me = model_.process;
  switch (c.op) {
    case OpKind::kAllReduce:
      MPI_Iallreduce(MPI_IN_PLACE, c.data, n, type, mpi_op(c.reduce), comm, &native_req_);
      break;
    case OpKind::kReduceScatter:
      MPI_Ireduce_scatter(c.in, c.data, native_counts_.data(), type, mpi_op(c.reduce), comm,
                          &native_req_);
      break;
    case OpKind::kAllGather:
      MPI_Iallgatherv(c.in, native_counts_[me], type, c.data, native_counts_.data(),
                      native_displs_.data(), type, comm, &native_req_);
      break;
    case OpKind::kBroadcast:
      MPI_Ibcast(c.data, n, type, c.root, comm, &native_req_);
      break;
    default:  // kReduce
      MPI_Ireduce(c.root == me ? MPI_IN_PLACE : c.data, c.root == me ? c.data : nullptr, n, type,
                  mpi_op(c.reduce), c.root, comm, &native_req_);
      break;
  }
  native_state_.store(kRunning, std::memory_order_release);
  return true;
}

bool MpiLink::progress(MPI_Comm comm) {
  bool busy = progress_native(comm);
  const uint64_t now = epoch();
  if (now != seen_epoch_) {  // a new run: messages that arrived early are due now
    seen_epoch_ = now;
    // Run 0 is a World's state before its first run: nothing to begin.
    if ((now & 0xffffffffu) != 0 && model_.processes > 1) {
      send_control(comm, WireKind::kBegin, model_.first_rank(), "");
    }
    std::vector<WireBuf> early;
    early.swap(*future);
    for (WireBuf b : early) dispatch(b);
    busy = true;
  }
  // Sends queued by the rank threads.
  for (int i = 0; i < model_.threads; ++i) {
    RankQueues& q = queues_[i];
    WireBuf b;
    while (q.out.pop(b)) {
      post_send(comm, b, i);
      busy = true;
    }
    while (q.returned.pop(b)) recv_pool->put(b);
    std::vector<WireBuf>& held = overflow_[i];
    if (!held.empty()) {
      size_t n = 0;
      while (n < held.size() && q.in.push(held[n])) ++n;
      held.erase(held.begin(), held.begin() + static_cast<std::ptrdiff_t>(n));
      if (n) state_->bell(model_.first_rank() + i).ring();
    }
  }
  // Completed sends: their buffers go back to their owners.
  if (!requests_.empty()) {
    completed_.resize(requests_.size());
    int count = 0;
    MPI_Testsome(static_cast<int>(requests_.size()), requests_.data(), &count, completed_.data(),
                 MPI_STATUSES_IGNORE);
    if (count != MPI_UNDEFINED && count > 0) {
      // Remove from the back so that swapping in the last element keeps indices valid.
      std::sort(completed_.begin(), completed_.begin() + count, std::greater<int>());
      for (int j = 0; j < count; ++j) {
        const size_t k = static_cast<size_t>(completed_[j]);
        const PendingSend sent = sends_[k];
        requests_[k] = requests_.back();
        requests_.pop_back();
        sends_[k] = sends_.back();
        sends_.pop_back();
        if (sent.owner < 0) {
          control_pool_.put(sent.buf);
        } else if (!queues_[sent.owner].spare.push(sent.buf)) {
          free_wire(sent.buf);
        }
      }
      busy = true;
    }
  }
  // Read before the abort flag: a finished run's failures are then visible below.
  const uint64_t finish = finish_epoch_.load(std::memory_order_acquire);
  // A local rank failed first: tell every other process, before our end-of-run message.
  if (state_->aborted() && abort_sent_epoch_ != now) {
    abort_sent_epoch_ = now;
    const std::string reason = state_->abort_reason();  // "rank R failed: what"
    int failed = -1;
    if (std::sscanf(reason.c_str(), "rank %d failed: ", &failed) == 1 && model_.is_local(failed)) {
      const std::string prefix = "rank " + std::to_string(failed) + " failed: ";
      send_control(comm, WireKind::kAbort, failed, reason.substr(prefix.size()));
    }
    busy = true;
  }
  if (finish == now && done_sent_epoch_.load(std::memory_order_relaxed) != now) {
    send_control(comm, WireKind::kDone, model_.first_rank(), "");
    done_sent_epoch_.store(now, std::memory_order_release);
    busy = true;
  }
  return busy;
}

}  // namespace dtsim::mpi
