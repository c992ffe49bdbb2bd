// The collective benchmark harness shared by the Google Benchmark suite and nccl_table.
//
// Timing design: one World::run per measurement. Inside it every rank verifies the
// collective once against values worked out by hand, warms up, then for each trial waits
// at a barrier and runs `iters` back-to-back calls. A trial's time is wall clock from the
// first rank leaving the barrier to the last rank finishing (max over ranks), divided by
// `iters`, so the wake-up of World::run itself is never part of a collective's time.
// Every size runs back to back, as nccl-tests and bench/mpi_allreduce.cc do (until 2026-12-01
// calls of 4 MiB and more were separated by a barrier, a relic of the days before the byte
// budget; bench/RESULTS.md says which rows were measured with it).
//
// Sizes follow nccl-tests: `bytes` is the whole buffer (all_reduce, broadcast, reduce),
// the reduce_scatter input, the all_gather output, the all_to_all input of one rank.
// algbw = bytes / time; busbw = algbw * bus_factor (nccl-tests' PERFORMANCE.md).
//
// Thread safety: a CollectiveHarness is driven by one (non-rank) thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/types.h"
#include "runtime/world.h"

namespace dtsim::bench {

enum class Coll { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kReduce, kAllToAll };

inline constexpr Coll kAllColls[] = {Coll::kAllReduce, Coll::kReduceScatter, Coll::kAllGather,
                                     Coll::kBroadcast, Coll::kReduce,        Coll::kAllToAll};

const char* coll_name(Coll c);
bool parse_coll(const std::string& s, Coll* out);
// nccl-tests' bus bandwidth factor: all_reduce 2(N-1)/N; reduce_scatter, all_gather and
// all_to_all (N-1)/N; broadcast and reduce 1.
double bus_factor(Coll c, int n);
// The collective's OpKind, for the algorithm registry.
OpKind op_of(Coll c);
// The algorithms the registry lists for `c` that the thread world runs (kAuto first).
std::vector<Algo> algos_of(Coll c);
// "sum" for the reducing collectives, "none" otherwise (the nccl-tests redop column).
const char* redop_of(Coll c);

struct CollCase {
  Coll coll = Coll::kAllReduce;
  Algo algo = Algo::kAuto;
  int ranks = 2;
  size_t bytes = 8;  // requested; see elements()
  // float32 elements of the buffer `bytes` describes, rounded to a multiple of `ranks` for
  // the chunked collectives (as nccl-tests does), at least one per rank.
  size_t elements() const;
  size_t size_bytes() const { return elements() * sizeof(float); }
  // nccl-tests' count column: elements per rank's chunk for RS/AG/A2A, else all of them.
  size_t count() const;
};

struct CollResult {
  int64_t wrong = 0;                     // elements that differed from the expected result
  std::vector<double> seconds_per_call;  // one per trial
};

class CollectiveHarness {
 public:
  CollectiveHarness() = default;
  ~CollectiveHarness();
  CollectiveHarness(const CollectiveHarness&) = delete;
  CollectiveHarness& operator=(const CollectiveHarness&) = delete;

  // Options of the worlds made from now on (e.g. WorldOptions::spin for a policy sweep).
  void set_world_options(const WorldOptions& o) {
    options_ = o;
    world_.reset();
  }
  // The world for `c`: cached while N, collective and algorithm stay the same.
  World& world(const CollCase& c);
  // Verifies `c` once (when verify is set), then times `trials` trials of `iters` calls.
  CollResult run(const CollCase& c, int64_t iters, int trials, bool verify = true);
  // Picks a number of calls per trial so that one trial lasts about `target_seconds`.
  int64_t calibrate(const CollCase& c, double target_seconds);

 private:
  struct RankBuffers {
    std::vector<float> in, out;
  };
  WorldOptions options_;
  std::unique_ptr<World> world_;
  std::tuple<int, int, int> world_key_{0, 0, 0};
  std::vector<RankBuffers> buffers_;
};

// Seconds per byte-copy of `bytes` with memcpy (median of `trials`), the bandwidth yardstick.
double memcpy_seconds(size_t bytes, int trials);

// Median of a non-empty vector (copied).
double median(std::vector<double> v);

// "8", "1K", "64M": parses sizes with optional K/M/G (powers of 1024) suffixes.
bool parse_bytes(const std::string& s, size_t* out);

}  // namespace dtsim::bench
