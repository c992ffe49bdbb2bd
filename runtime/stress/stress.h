// Stress testing for the collectives: random sequences of collective calls (ops, lengths
// including 0 and uneven ones, algorithms, roots, reduce ops, element types, subgroups from
// new_group and split), run on rank threads with seeded jitter in the transport, every
// result checked against a single-threaded reference. Calls of the deterministic
// algorithms (kDeterministic, kDirect) run twice and must be bitwise equal to each other
// and to a sequential sum in rank order.
//
// Every plan of two or more ranks also holds one failing lender (stress_plan.h): a rank
// whose call fails after lending, which every receiver must survive with intact bytes or
// the withdrawal error.
//
// Every process derives the same plan from (seed, iteration) on its own, with no
// communication, once; its rank threads share it read-only, and the reference is computed
// once from the same plan. Between calls each
// rank overwrites its buffers, so a transport that handed out live pointers instead of
// snapshots (WorldOptions::unsafe_live_sends) shows up as wrong results.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/planted.h"
#include "runtime/process_model.h"
#include "runtime/world.h"

namespace dtsim {

struct StressOptions {
  int ranks = 8;
  int iterations = 10;
  int first_iteration = 0;  // iteration i's plan depends only on (seed, i)
  uint64_t seed = 1;
  uint32_t jitter_us = 0;
  bool unsafe_live_sends = false;
  // The base deadline of a blocked wait; each iteration's World gets more for its work
  // (stress_allowance).
  std::chrono::milliseconds timeout{10000};
  int calls_per_iteration = 16;         // collective calls (group creations come on top)
  size_t max_numel = 2048;              // typical length; one call in ten is up to 8x longer
  bool keep_going = false;              // run every iteration even after a failure
  const PlantedBug* planted = nullptr;  // a planted bug (planted.h) the run must find
  // Called before each iteration's World is made, to adjust its options (the controlled
  // scheduler of runtime/schedule/explore.h sets itself up here; thread worlds only).
  std::function<void(int iteration, WorldOptions&)> configure;
  // Thread world (default) or an MPI job (every process calls run_stress with the same
  // options; ranks must equal processes * threads). Under MPI each process checks its own
  // ranks, and the counts of the result are summed over all ranks by an all_reduce.
  ProcessModel process = ProcessModel::threads_only(0);
};

struct StressResult {
  int iterations = 0;            // iterations run
  uint64_t collectives = 0;      // collective calls run (per communicator, not per rank)
  uint64_t results_checked = 0;  // per-rank results compared with the reference
  uint64_t failures = 0;         // wrong results, plus iterations that threw
  uint64_t lends_refused = 0;    // failing-lend receives refused as withdrawn (thread worlds)
  int first_failed_iteration = -1;
  std::vector<std::string> messages;  // the first few failures, one line each (errors may
                                      // carry a multi-line desync report); under MPI, those
                                      // of this process's ranks
  std::string flight_report;          // flight recorders of the first failed iteration
  bool ok() const { return failures == 0; }
};

// Runs iterations first_iteration .. first_iteration + iterations - 1, each in a fresh
// World of `ranks` threads (jitter seeded from (seed, iteration)). Stops after the first
// failing iteration unless keep_going. `on_iteration` (optional) runs after each one.
StressResult run_stress(
    const StressOptions& options,
    const std::function<void(int iteration, const StressResult&)>& on_iteration = {});

// What iteration `iteration`'s World gets beyond the options, from the work of its largest
// call (stress_plan.h, work(): messages, bytes sent and bytes in flight, over all its ranks):
//   - timeout: o.timeout plus 50 us a message and 1 s per 50 MB sent (milliseconds::max()
//     stays so). A wait may span a whole call of the world's, and every rank shares the
//     host's cores, so the allowance grows with the call's world-wide work.
//   - max_bytes_in_flight: at least twice the bytes the call may have in flight at once,
//     plus 64 B a message (payload buffers are powers of two), and never below the default,
//     so that no call waits on flow control: a direct schedule that sends everything before
//     it receives cannot progress once the budget is full. The runtime's tests cover the
//     budget; stress looks for wrong results. estimate_peak_bytes counts those bytes.
// Thread safety: a pure function.
struct StressAllowance {
  std::chrono::milliseconds timeout;
  size_t max_bytes_in_flight = WorldOptions::kDefaultMaxBytesInFlight;
};
StressAllowance stress_allowance(const StressOptions& o, int iteration);

// An estimate of the memory iteration `iteration` of `o` needs at its peak, in bytes: the
// ranks' buffers (input, output, the deterministic algorithms' first result), the reference
// results of every call, and one call's temporaries (the reference's inputs, snapshots in
// flight). Made from the plan alone, allocating nothing; measured against the peak resident
// size in docs/runtime.md. Thread safety: a pure function.
uint64_t estimate_peak_bytes(const StressOptions& o, int iteration);

// Sizes scale for slow builds: DTSIM_STRESS_SCALE (env, a divisor >= 1; defaults to 4
// under sanitizers, else 1). Tests divide iterations and lengths by it.
int stress_scale();

}  // namespace dtsim
