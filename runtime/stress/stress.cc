#include "runtime/stress/stress.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>

#include "runtime/communicator.h"
#include "runtime/exchange.h"
#include "runtime/schedule/scheduler.h"
#include "runtime/split.h"
#include "runtime/stress/stress_plan.h"
#include "runtime/world.h"

namespace dtsim {
namespace {

using stress::Plan;
using stress::Step;
using stress::StepKind;

constexpr size_t kMaxMessages = 8;

// The deadline's allowance for work (stress.h, stress_allowance): what a call's messages and
// bytes may take on a loaded, oversubscribed 2-core host. Measured there (load 7-100): 13 us
// a message world-wide at 512 ranks, 150 MB/s of bytes sent at 8 ranks x 1 GB buffers.
constexpr double kSecondsPerMessage = 50e-6;
constexpr double kBytesPerSecond = 50e6;

// Thrown by the rank that finds a wrong result (in a thread world): World::run then aborts
// every other rank at once (instead of letting them wait out the deadline for a peer that
// stopped making sense), and run_stress counts the failure from the slot, not twice.
struct WrongResult : Error {
  using Error::Error;
};
constexpr std::byte kPoison{0xA5};

// Thrown by the lender of a kFailingLend step, by design, after its sends.
struct LenderGivesUp : Error {
  using Error::Error;
};

// One rank's buffers: sized by the main thread before the run and never reallocated
// during it (under unsafe_live_sends another rank may still read them).
struct RankSlot {
  stress::Bytes in, out, first;       // uninitialised: each call fills or poisons what it uses
  std::vector<std::string> failures;  // the first kMaxMessages
  uint64_t checked = 0, failed = 0;
  uint64_t lends_refused = 0;  // kFailingLend receives refused as withdrawn
};

// Records a wrong result `diff` of step `i` on this rank of `comm`.
void report(const StressOptions& o, int iteration, int i, const Step& s, Communicator& comm,
            const char* note, const std::string& diff, RankSlot& slot) {
  ++slot.failed;
  const std::string what = "iteration " + std::to_string(iteration) + " step " + std::to_string(i) +
                           ": " + stress::describe(s) + " on " + comm.name() + note + ": rank " +
                           std::to_string(comm.rank()) + " (global " +
                           std::to_string(comm.global_rank()) + ") " + diff;
  if (slot.failures.size() < kMaxMessages) slot.failures.push_back(what);
  // The first wrong result ends the iteration's world. Not across processes: there the
  // others would see only an abort, and every rank's counts are summed after the run.
  if (!o.process.mpi) throw WrongResult(what);
}

// Runs step `i` on rank `me` of communicator `comm`, checks the result, then poisons the
// buffers so that a receiver still reading them through a live pointer sees garbage.
void run_call(Communicator& comm, const StressOptions& o, int iteration, int i, const Step& s,
              const stress::Bytes& want, RankSlot& slot) {
  const int g = comm.size();
  const int r = comm.rank();
  const size_t es = dtype_size(s.dtype);
  const size_t in_n = stress::input_count(s, g, r);
  const size_t out_n = stress::output_count(s, g, r);
  for (int rep = 0; rep < s.repeats; ++rep) {
    std::memset(slot.out.data(), static_cast<int>(kPoison), out_n * es);
    stress::fill_input(o.seed, iteration, i, s, g, r, slot.in.data());
    // Empty buffers are null, as an empty std::vector's data() may be.
    void* in = in_n ? slot.in.data() : nullptr;
    void* out = out_n ? slot.out.data() : nullptr;
    const std::byte* result = slot.out.data();
    switch (s.op) {
      case OpKind::kAllReduce:
        comm.all_reduce_raw(in, s.numel, s.dtype, s.reduce, s.algo);
        result = slot.in.data();
        break;
      case OpKind::kReduce:
        comm.reduce_raw(in, s.numel, s.dtype, s.root, s.reduce, s.algo);
        result = slot.in.data();
        break;
      case OpKind::kBroadcast:
        comm.broadcast_raw(in, s.numel, s.dtype, s.root, s.algo);
        result = slot.in.data();
        break;
      case OpKind::kReduceScatter:
        comm.reduce_scatter_raw(in, s.numel, out, out_n, s.dtype, s.reduce, s.algo);
        break;
      case OpKind::kAllGather:
        comm.all_gather_raw(in, in_n, out, out_n, s.dtype, s.algo);
        break;
      case OpKind::kAllToAll:
        if (s.single) {
          std::vector<size_t> send(g), recv(g);
          for (int j = 0; j < g; ++j) {
            send[j] = s.counts[r * g + j];
            recv[j] = s.counts[j * g + r];
          }
          comm.all_to_all_single_raw(in, in_n, send, out, out_n, recv, s.dtype, s.algo);
        } else {
          comm.all_to_all_raw(in, in_n, out, out_n, s.dtype, s.algo);
        }
        break;
      default:
        comm.barrier();
        break;
    }
    ++slot.checked;
    const size_t bytes = want.size();
    std::string diff;
    if (bytes != (s.op == OpKind::kBarrier ? 0 : out_n * es)) {
      diff = "output has the wrong size";
    } else if (bytes && std::memcmp(result, want.data(), bytes) != 0) {
      diff = stress::first_difference(s.dtype, result, want.data(), bytes / es);
    } else if (rep > 0 && bytes && std::memcmp(result, slot.first.data(), bytes) != 0) {
      diff = "repeated run differs bitwise from the first";
    }
    if (rep == 0 && s.repeats > 1 && bytes) std::memcpy(slot.first.data(), result, bytes);
    if (!diff.empty()) report(o, iteration, i, s, comm, rep ? " (repeat)" : "", diff, slot);
    // A late reader of a live pointer must not find the right bytes by luck.
    std::memset(slot.in.data(), static_cast<int>(~kPoison), in_n * es);
    std::memset(slot.out.data(), static_cast<int>(~kPoison), out_n * es);
  }
}

// A kFailingLend step (stress_plan.h) on its own group `comm`: the lender lends, sends
// once more, fails and overwrites its buffer at once, as a caller may when a call throws.
// What lend.cc promises: a receiver reads each lent chunk intact, or is refused with the
// withdrawal error; it never sees the overwritten bytes. Both sides' communicator is
// unusable after their error.
void run_failing_lend(Communicator& comm, const StressOptions& o, int iteration, int i,
                      const Step& s, const stress::Bytes& want, RankSlot& slot) {
  const int g = comm.size();
  const int r = comm.rank();
  const size_t es = dtype_size(s.dtype);
  const Signature sig{OpKind::kBroadcast, s.dtype, ReduceOp::kSum, Algo::kDirect, s.root, s.numel};
  auto part = [&](int c) {
    return std::pair{split_offset(s.numel, s.chunks, c), split_size(s.numel, s.chunks, c)};
  };
  std::string error;  // the error this rank's call ended with
  ++slot.checked;
  if (r == s.root) {
    stress::fill_input(o.seed, iteration, i, s, g, r, slot.in.data());
    try {
      Exchange ex(comm, sig);
      for (int c = 0; c < s.chunks; ++c) {
        const auto [off, len] = part(c);
        for (int p = 0; p < g; ++p) {
          if (p != r) ex.send_or_lend(p, c, ex.at(slot.in.data(), off), len);
        }
      }
      for (int p = 0; p < g; ++p) {
        if (p != r) ex.send(p, s.chunks, slot.in.data(), 1);
      }
      throw LenderGivesUp("rank " + std::to_string(comm.global_rank()) +
                          " gives up after lending, by design");
    } catch (const LenderGivesUp& e) {
      error = e.what();
    }
    // The call is over: its buffer is the caller's again, and no receiver may read it now.
    std::memset(slot.in.data(), static_cast<int>(kPoison), s.numel * es);
    if (error.empty()) report(o, iteration, i, s, comm, "", "lender's call did not fail", slot);
  } else {
    std::memset(slot.out.data(), static_cast<int>(~kPoison), s.numel * es);
    int got = 0;  // chunks read
    std::byte first[8];
    try {
      Exchange ex(comm, sig);
      for (; got < s.chunks; ++got) {
        const auto [off, len] = part(got);
        ex.recv_copy(s.root, got, ex.at(slot.out.data(), off), len);
      }
      ex.recv_copy(s.root, s.chunks, first, 1);
    } catch (const AbortedError& e) {
      error = e.what();
      // Only the refusal is this step's outcome; any other abort is a failure elsewhere.
      const std::string refusal = "rank " + std::to_string(comm.global_rank(s.root)) +
                                  " withdrew the message it lent for this call";
      if (error.find(refusal) == std::string::npos) throw;
      ++slot.lends_refused;
    }
    const size_t read = got == s.chunks ? s.numel : part(got).first;
    std::string diff;
    if (read && std::memcmp(slot.out.data(), want.data(), read * es) != 0) {
      diff = stress::first_difference(s.dtype, slot.out.data(), want.data(), read);
    } else if (error.empty() && std::memcmp(first, want.data(), es) != 0) {
      diff = "the snapshot sent after the lends is wrong: " +
             stress::first_difference(s.dtype, first, want.data(), 1);
    }
    if (!diff.empty()) report(o, iteration, i, s, comm, "", diff, slot);
  }
  if (error.empty()) return;
  // An error escaped the call: the communicator must refuse every later call at once.
  try {
    comm.barrier();
  } catch (const AbortedError&) {
    return;
  }
  report(o, iteration, i, s, comm, "", "communicator still usable after its call failed", slot);
}

// Runs `plan` (built once per process, read-only here) on rank `world.rank()`.
void run_rank(Communicator& world, const StressOptions& o, int iteration, const Plan& plan,
              const std::vector<std::vector<stress::Bytes>>& want, RankSlot& slot) {
  std::vector<std::unique_ptr<Communicator>> comms(plan.groups.size());
  Communicator* self = &world;
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const Step& s = plan.steps[i];
    if (s.kind == StepKind::kNewGroup) {
      comms[s.group] = world.new_group(s.members);
      continue;
    }
    const int me = world.rank();
    if (s.kind == StepKind::kFailingLend) {
      const auto comm = world.new_group(s.members);
      if (comm)
        run_failing_lend(*comm, o, iteration, static_cast<int>(i), s, want[i][comm->rank()], slot);
      continue;
    }
    if (s.kind == StepKind::kSplit) {
      auto c = world.split(s.colors[me], s.keys[me]);
      if (s.colors[me] >= 0) comms[s.group + s.colors[me]] = std::move(c);
      continue;
    }
    Communicator* comm = s.group == 0 ? self : comms[s.group].get();
    if (comm == nullptr) continue;
    run_call(*comm, o, iteration, static_cast<int>(i), s, want[i][comm->rank()], slot);
  }
}

// Sums every rank's (checked, failed) over the world, through the runtime itself: under MPI
// a process holds only its own ranks' counts.
void sum_counts(World& world, std::vector<RankSlot>& slots) {
  std::vector<std::array<int64_t, 2>> sums(world.model().threads);
  world.run([&](Communicator& c) {
    RankSlot& slot = slots[c.rank()];
    std::array<int64_t, 2> v = {static_cast<int64_t>(slot.checked),
                                static_cast<int64_t>(slot.failed)};
    c.all_reduce(std::span<int64_t>(v), ReduceOp::kSum, Algo::kDirect);
    sums[c.rank() - world.first_rank()] = v;
  });
  for (RankSlot& slot : slots) slot.checked = slot.failed = 0;
  // Every rank got the same sums; the process's first rank carries them.
  slots[world.first_rank()].checked = static_cast<uint64_t>(sums[0][0]);
  slots[world.first_rank()].failed = static_cast<uint64_t>(sums[0][1]);
}

std::string flight_report(const World& world) {
  std::string out;
  for (int r = world.first_rank(); r < world.first_rank() + world.model().threads; ++r) {
    const auto entries = world.flight_record(r);
    out += "rank " + std::to_string(r) + " (last " + std::to_string(entries.size()) +
           " collectives):\n";
    for (const auto& e : entries) out += "  " + describe(e) + "\n";
  }
  return out;
}

StressAllowance allowance(const StressOptions& o, const Plan& plan) {
  double work_s = 0;
  StressAllowance a{o.timeout};
  for (const Step& s : plan.steps) {
    if (s.kind != StepKind::kCall && s.kind != StepKind::kFailingLend) continue;
    const stress::Work w = stress::work(s, static_cast<int>(plan.groups[s.group].size()));
    work_s = std::max(work_s, static_cast<double>(w.messages) * kSecondsPerMessage +
                                  static_cast<double>(w.bytes) / kBytesPerSecond);
    a.max_bytes_in_flight =
        std::max<size_t>(a.max_bytes_in_flight, 2 * w.in_flight + 64 * w.messages);
  }
  if (o.timeout != std::chrono::milliseconds::max()) {
    a.timeout += std::chrono::milliseconds(static_cast<int64_t>(std::ceil(work_s * 1000)));
  }
  return a;
}

}  // namespace

StressAllowance stress_allowance(const StressOptions& o, int iteration) {
  return allowance(
      o, stress::make_plan(o.seed, iteration, o.ranks, o.calls_per_iteration, o.max_numel));
}

uint64_t estimate_peak_bytes(const StressOptions& o, int iteration) {
  const Plan plan =
      stress::make_plan(o.seed, iteration, o.ranks, o.calls_per_iteration, o.max_numel);
  std::vector<uint64_t> need(o.ranks, 1);
  uint64_t want = 0, call_peak = 0;
  for (const Step& s : plan.steps) {
    if (s.kind != StepKind::kCall && s.kind != StepKind::kFailingLend) continue;
    const auto& members = plan.groups[s.group];
    const int g = static_cast<int>(members.size());
    uint64_t in = 0, out = 0;
    for (int r = 0; r < g; ++r) {
      const uint64_t i = stress::input_count(s, g, r) * dtype_size(s.dtype);
      const uint64_t u = stress::output_count(s, g, r) * dtype_size(s.dtype);
      need[members[r]] = std::max(need[members[r]], std::max(i, u));
      in += i;
      out += u;
    }
    want += out;
    // The reference's inputs and result, and each rank's snapshot of its input in flight;
    // or the copies in flight at once (work()), when more.
    call_peak = std::max({call_peak, 2 * in + out, stress::work(s, g).in_flight});
  }
  uint64_t buffers = 0;
  for (uint64_t b : need) buffers += 3 * b;  // in, out, first
  return buffers + want + call_peak;
}

int stress_scale() {
  if (const char* env = std::getenv("DTSIM_STRESS_SCALE")) return std::max(1, std::atoi(env));
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  return 4;
#else
  return 1;
#endif
}

StressResult run_stress(const StressOptions& o,
                        const std::function<void(int, const StressResult&)>& on_iteration) {
  StressResult res;
  std::vector<RankSlot> slots(o.ranks);
  for (int it = o.first_iteration; it < o.first_iteration + o.iterations; ++it) {
    const Plan plan = stress::make_plan(o.seed, it, o.ranks, o.calls_per_iteration, o.max_numel);
    // The single-threaded reference, and buffer sizes, from the same plan.
    std::vector<std::vector<stress::Bytes>> want(plan.steps.size());
    std::vector<size_t> need(o.ranks, 1);
    for (size_t i = 0; i < plan.steps.size(); ++i) {
      const Step& s = plan.steps[i];
      if (s.kind != StepKind::kCall && s.kind != StepKind::kFailingLend) continue;
      const auto& members = plan.groups[s.group];
      const int g = static_cast<int>(members.size());
      want[i] = stress::reference(o.seed, it, static_cast<int>(i), s, g);
      for (int r = 0; r < g; ++r) {
        const size_t n = std::max(stress::input_count(s, g, r), stress::output_count(s, g, r));
        need[members[r]] = std::max(need[members[r]], n * dtype_size(s.dtype));
      }
      ++res.collectives;
    }
    for (int r = 0; r < o.ranks; ++r) {
      RankSlot& slot = slots[r];
      for (stress::Bytes* b : {&slot.in, &slot.out, &slot.first}) {
        if (b->size() != need[r]) *b = stress::Bytes(need[r]);
      }
      slot.failures.clear();
    }
    WorldOptions wo;
    const StressAllowance allow = allowance(o, plan);
    wo.timeout = allow.timeout;
    wo.max_bytes_in_flight = allow.max_bytes_in_flight;
    wo.jitter_us = o.jitter_us;
    wo.jitter_seed = o.seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(it);
    wo.unsafe_live_sends = o.unsafe_live_sends;
    // Odd iterations lend every ring chunk of 64 bytes or more (the default only lends
    // from 64 KiB), so the lend/settle protocol meets the jitter at every length.
    if (it % 2) wo.lend_bytes = 64;
    wo.planted = o.planted;
    if (o.configure) o.configure(it, wo);
    World world(o.process.mpi ? o.process : ProcessModel::threads_only(o.ranks), wo);
    if (world.size() != o.ranks) {
      throw UsageError("stress: --ranks " + std::to_string(o.ranks) + " does not match the " +
                       o.process.describe() + " of this job (" + std::to_string(world.size()) +
                       " ranks)");
    }
    bool failed = false;
    try {
      world.run([&](Communicator& c) { run_rank(c, o, it, plan, want, slots[c.rank()]); });
    } catch (const RankFailure& e) {
      // Across processes a failed run may mean a lost process: stop, with the error
      // (sum_counts below would wait out another deadline for the lost process).
      if (o.process.mpi) throw;
      failed = true;
      bool wrong_result = false;  // already counted and described by its rank's slot
      try {
        std::rethrow_exception(e.cause());
      } catch (const WrongResult&) {
        wrong_result = true;
      } catch (...) {
      }
      if (!wrong_result) {
        ++res.failures;
        if (res.messages.size() < kMaxMessages) {
          res.messages.push_back("iteration " + std::to_string(it) + ": " + e.what());
        }
      }
    } catch (const std::exception& e) {
      // Across processes a failed run may mean a lost process: stop, with the error.
      if (o.process.mpi) throw;
      failed = true;
      ++res.failures;
      if (res.messages.size() < kMaxMessages) {
        res.messages.push_back("iteration " + std::to_string(it) + ": " + e.what());
      }
    }
    if (o.process.mpi) sum_counts(world, slots);
    for (RankSlot& slot : slots) {
      res.results_checked += slot.checked;
      slot.checked = 0;
      res.lends_refused += slot.lends_refused;
      slot.lends_refused = 0;
      res.failures += slot.failed;
      failed |= slot.failed != 0;
      slot.failed = 0;
      for (auto& m : slot.failures) {
        if (res.messages.size() < kMaxMessages) res.messages.push_back(std::move(m));
      }
    }
    ++res.iterations;
    if (failed && res.first_failed_iteration < 0) {
      res.first_failed_iteration = it;
      res.flight_report = flight_report(world);
      if (wo.scheduler) res.flight_report += wo.scheduler->summary(32) + "\n";
    }
    if (on_iteration) on_iteration(it, res);
    if (failed && !o.keep_going) break;
  }
  return res;
}

}  // namespace dtsim
