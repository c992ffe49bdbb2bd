// Shared by the runtime tests: the lesson's single-threaded reference (a list of vectors,
// xs[r] being rank r's copy), data generators with fixed seeds, comparisons that report
// the first differing element, and helpers that run one function on every rank of a World
// and collect each rank's buffer.
//
// The world the suites run on (as gloo's tests run over every transport): threads when
// started directly; under mpiexec, MPI processes of DTSIM_THREADS_PER_PROCESS rank threads
// each (1: MPI, np 2 in ctest; 2: hybrid 2 x 2). A TestWorld is built on that transport;
// sweep_sizes() gives the sizes it can have; run_in_place and run_out_of_place return every
// rank's buffer in every process (share_results). Tests that read other ranks' memory
// directly are threads_only().
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "common/bf16.h"
#include "runtime/algorithms/registry.h"
#include "runtime/communicator.h"
#include "runtime/split.h"
#include "runtime/world.h"

namespace dtsim::testing {

// Under a sanitizer (DTSIM_TEST_SMALL) the sweeps keep every kind of case but shrink the
// largest length, so that TSan's 5-15x slowdown stays bearable.
#ifdef DTSIM_TEST_SMALL
inline constexpr bool kSmall = true;
inline constexpr size_t kLargeOdd = 10007;
#else
inline constexpr bool kSmall = false;
inline constexpr size_t kLargeOdd = 100003;
#endif

// ---- the transport under test ----

// Rank threads per MPI process (DTSIM_THREADS_PER_PROCESS; 1 when unset).
inline int threads_per_process() {
  const char* v = std::getenv("DTSIM_THREADS_PER_PROCESS");
  return v && std::atoi(v) > 0 ? std::atoi(v) : 1;
}
// True under mpiexec: the suites run on MPI processes (of threads_per_process() threads).
inline bool over_mpi() { return ProcessModel::launched_by_mpi(); }
// "threads", "mpi" or "hybrid": for messages.
inline const char* transport_name() {
  return !over_mpi() ? "threads" : threads_per_process() == 1 ? "mpi" : "hybrid";
}
// The layout of a TestWorld of `n` ranks: n threads, or the MPI job's processes of
// n / processes threads each.
inline ProcessModel test_model(int n) {
  if (!over_mpi()) return ProcessModel::threads_only(n);
  ProcessModel m = ProcessModel::from_environment(n, 1);
  if (n % m.processes != 0) {
    throw std::invalid_argument("a TestWorld of " + std::to_string(n) + " ranks over " +
                                std::to_string(m.processes) +
                                " MPI processes; take the sizes from sweep_sizes()");
  }
  m.threads = n / m.processes;
  return m;
}

// A World of `n` ranks on the transport under test. Under MPI every process builds the
// same TestWorlds in the same order (the tests are deterministic), and n must be a
// multiple of the processes (sweep_sizes()).
class TestWorld : public World {
 public:
  explicit TestWorld(int n, WorldOptions o = {}) : World(test_model(n), o) {}
};

// Skips the test under MPI: for tests that share memory between ranks (atomics, pointers)
// or build a plain World of their own.
#define DTSIM_THREADS_ONLY()                                                \
  do {                                                                      \
    if (::dtsim::testing::over_mpi()) GTEST_SKIP() << "thread worlds only"; \
  } while (0)

// Whether `a` runs bfloat16: not Algo::kMpi (MPI has no such type; a usage error).
inline bool runs_bf16(Algo a) { return a != Algo::kMpi; }

// Every algorithm the registry lists for `op` that the world under test runs, kAuto
// first: what the sweeps run, so a new row is tested without editing the tests. (An MPI
// world of one rank per process also runs the library's own collectives, Algo::kMpi.)
inline std::vector<Algo> algorithms_to_test(OpKind op) {
  const uint8_t features =
      over_mpi() && threads_per_process() == 1 ? uint8_t{kWorldMpi} : uint8_t{kWorldBasic};
  std::vector<Algo> out = {Algo::kAuto};
  for (const AlgoRow* row : algorithms_of(op)) {
    if ((row->needs & ~features) == 0) out.push_back(row->algo);
  }
  return out;
}

// One tensor per rank: xs[r] is rank r's copy (the lesson's list[Tensor]).
template <class T>
using Ranks = std::vector<std::vector<T>>;

// World sizes every collective is checked at: 1..8 and 16 on threads; under MPI the job's
// processes times threads_per_process() (np 2: 2; hybrid 2 x 2: 4).
inline std::vector<int> sweep_sizes() {
  if (over_mpi()) return {ProcessModel::from_environment(1).processes * threads_per_process()};
  return {1, 2, 3, 4, 5, 6, 7, 8, 16};
}

// `sizes` on threads; under MPI the sizes the job can have (sweep_sizes()).
inline std::vector<int> sizes_or(std::vector<int> sizes) {
  return over_mpi() ? sweep_sizes() : sizes;
}

// Lengths {0, 1, 7, N - 1, 1000, large odd}, without duplicates.
inline std::vector<size_t> sweep_lengths(int n) {
  std::vector<size_t> v = {0, 1, 7, static_cast<size_t>(n - 1), 1000, kLargeOdd};
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

// ---- arithmetic of the reference, element type by element type ----

template <class T>
double to_double(T x) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    return static_cast<float>(x);
  } else {
    return static_cast<double>(x);
  }
}

// torch.maximum / torch.minimum: NaN propagates, max(-0, +0) = +0 and min(-0, +0) = -0.
template <class W>
W extreme(W a, W b, bool is_max) {
  if constexpr (std::is_floating_point_v<W>) {
    if (std::isnan(a)) return a;
    if (std::isnan(b)) return b;
    if (a == b) return std::signbit(a) == is_max ? b : a;
  }
  return is_max ? std::max(a, b) : std::min(a, b);
}

// a op b as the runtime defines it: in T, except bf16, which is computed in float and
// rounded back.
template <class T>
T combine(T a, T b, ReduceOp op) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    const float x = static_cast<float>(a), y = static_cast<float>(b);
    switch (op) {
      case ReduceOp::kMax:
        return BFloat16(extreme(x, y, true));
      case ReduceOp::kMin:
        return BFloat16(extreme(x, y, false));
      default:
        return BFloat16(x + y);
    }
  } else {
    switch (op) {
      case ReduceOp::kMax:
        return extreme(a, b, true);
      case ReduceOp::kMin:
        return extreme(a, b, false);
      default:
        return static_cast<T>(a + b);
    }
  }
}

// kAvg's last step: the sum divided by the group size.
template <class T>
T divide(T a, int n) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    return BFloat16(static_cast<float>(a) / static_cast<float>(n));
  } else {
    return static_cast<T>(a / static_cast<T>(n));
  }
}

// ---- the single-threaded reference ----

// Element-wise reduction of all ranks, summed sequentially in rank order x0 op x1 op ...
template <class T>
std::vector<T> ref_reduction(const Ranks<T>& xs, ReduceOp op) {
  std::vector<T> acc = xs.at(0);
  for (size_t r = 1; r < xs.size(); ++r) {
    for (size_t i = 0; i < acc.size(); ++i) acc[i] = combine(acc[i], xs[r][i], op);
  }
  if (op == ReduceOp::kAvg) {
    for (T& v : acc) v = divide(v, static_cast<int>(xs.size()));
  }
  return acc;
}

template <class T>
Ranks<T> ref_broadcast(const Ranks<T>& xs, int src) {
  return Ranks<T>(xs.size(), xs.at(src));
}

template <class T>
Ranks<T> ref_reduce(const Ranks<T>& xs, int dst, ReduceOp op) {
  Ranks<T> out = xs;
  out.at(dst) = ref_reduction(xs, op);
  return out;
}

template <class T>
Ranks<T> ref_all_reduce(const Ranks<T>& xs, ReduceOp op) {
  return Ranks<T>(xs.size(), ref_reduction(xs, op));
}

// Elements [split_offset(i), + split_size(i)) of v: chunk i of tensor_split(v, parts).
template <class T>
std::vector<T> chunk_of(const std::vector<T>& v, size_t parts, size_t i) {
  const size_t off = split_offset(v.size(), parts, i);
  return {v.begin() + static_cast<std::ptrdiff_t>(off),
          v.begin() + static_cast<std::ptrdiff_t>(off + split_size(v.size(), parts, i))};
}

template <class T>
Ranks<T> ref_reduce_scatter(const Ranks<T>& xs, ReduceOp op) {
  const std::vector<T> s = ref_reduction(xs, op);
  Ranks<T> out;
  for (size_t r = 0; r < xs.size(); ++r) out.push_back(chunk_of(s, xs.size(), r));
  return out;
}

template <class T>
Ranks<T> ref_all_gather(const Ranks<T>& xs) {
  std::vector<T> full;
  for (const auto& x : xs) full.insert(full.end(), x.begin(), x.end());
  return Ranks<T>(xs.size(), full);
}

// Chunk j of rank i goes to rank j, at position i.
template <class T>
Ranks<T> ref_all_to_all(const Ranks<T>& xs) {
  const size_t n = xs.size();
  Ranks<T> out(n);
  for (size_t j = 0; j < n; ++j) {
    for (size_t i = 0; i < n; ++i) {
      const std::vector<T> c = chunk_of(xs[i], n, j);
      out[j].insert(out[j].end(), c.begin(), c.end());
    }
  }
  return out;
}

// counts[i][j] elements of rank i, in order, go to rank j; rank j receives them in rank
// order of the senders.
template <class T>
Ranks<T> ref_all_to_all_single(const Ranks<T>& xs, const std::vector<std::vector<size_t>>& counts) {
  const size_t n = xs.size();
  Ranks<T> out(n);
  for (size_t i = 0; i < n; ++i) {
    size_t off = 0;
    for (size_t j = 0; j < n; ++j) {
      out[j].insert(out[j].end(), xs[i].begin() + static_cast<std::ptrdiff_t>(off),
                    xs[i].begin() + static_cast<std::ptrdiff_t>(off + counts[i][j]));
      off += counts[i][j];
    }
  }
  return out;
}

// ---- data ----

// Integer values in [-bound, bound] of type T, so that sums are exact in every type
// (bf16 holds integers up to 256 exactly: keep bound * N below that).
template <class T>
Ranks<T> int_data(int n, size_t len, uint64_t seed, int64_t bound = 8) {
  std::mt19937_64 g(seed);
  std::uniform_int_distribution<int64_t> d(-bound, bound);
  Ranks<T> xs(n, std::vector<T>(len));
  for (auto& x : xs) {
    for (auto& v : x) {
      if constexpr (std::is_same_v<T, BFloat16>) {
        v = BFloat16(static_cast<float>(d(g)));
      } else {
        v = static_cast<T>(d(g));
      }
    }
  }
  return xs;
}

// Random normal floats scaled by 2^e, e uniform in [-spread, spread]: with a spread the
// order of a sum changes its bits; without one, sums in any order stay close.
template <class T>
Ranks<T> float_data(int n, size_t len, uint64_t seed, int spread = 12) {
  std::mt19937_64 g(seed);
  std::normal_distribution<double> d(0.0, 1.0);
  std::uniform_int_distribution<int> e(-spread, spread);
  Ranks<T> xs(n, std::vector<T>(len));
  for (auto& x : xs) {
    for (auto& v : x) v = static_cast<T>(std::ldexp(d(g), e(g)));
  }
  return xs;
}

// ---- comparisons ----

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// Every rank's buffer has exactly the bits of `want`'s; reports the first difference.
template <class T>
::testing::AssertionResult bitwise_equal(const Ranks<T>& got, const Ranks<T>& want) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << got.size() << " ranks, expected " << want.size();
  }
  for (size_t r = 0; r < got.size(); ++r) {
    if (got[r].size() != want[r].size()) {
      return ::testing::AssertionFailure() << "rank " << r << " has " << got[r].size()
                                           << " elements, expected " << want[r].size();
    }
    for (size_t i = 0; i < got[r].size(); ++i) {
      if (std::memcmp(&got[r][i], &want[r][i], sizeof(T)) != 0) {
        return ::testing::AssertionFailure()
               << "rank " << r << " element " << i << " of " << got[r].size() << ": got "
               << to_double(got[r][i]) << ", expected " << to_double(want[r][i]);
      }
    }
  }
  return ::testing::AssertionSuccess();
}

// |got - want| <= tol * (1 + |want|) element-wise (float sums in a different order).
template <class T>
::testing::AssertionResult near_equal(const Ranks<T>& got, const Ranks<T>& want, double tol) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "rank count differs";
  for (size_t r = 0; r < got.size(); ++r) {
    if (got[r].size() != want[r].size()) {
      return ::testing::AssertionFailure() << "rank " << r << " has " << got[r].size()
                                           << " elements, expected " << want[r].size();
    }
    for (size_t i = 0; i < got[r].size(); ++i) {
      const double g = to_double(got[r][i]), w = to_double(want[r][i]);
      if (!(std::fabs(g - w) <= tol * (1 + std::fabs(w)))) {
        return ::testing::AssertionFailure()
               << "rank " << r << " element " << i << ": got " << g << ", expected " << w;
      }
    }
  }
  return ::testing::AssertionSuccess();
}

// All ranks hold identical bits.
template <class T>
::testing::AssertionResult ranks_agree(const Ranks<T>& got) {
  for (size_t r = 1; r < got.size(); ++r) {
    if (!same_bits(got[r], got[0])) {
      return ::testing::AssertionFailure() << "rank " << r << " differs from rank 0";
    }
  }
  return ::testing::AssertionSuccess();
}

// ---- running a world ----

// Under MPI: gives every process every rank's buffer of `xs` (each process holds only
// its own ranks' results after a run), by a second run in which each rank broadcasts its
// buffer (direct: the root sends it to every rank). Sizes must already be right on every
// process. Nothing to do in a thread world.
template <class T>
void share_results(World& world, Ranks<T>& xs) {
  if (!world.model().mpi || world.model().processes == 1) return;
  const int n = world.size();
  world.run([&](Communicator& c) {
    std::vector<T> tmp;
    for (int r = 0; r < n; ++r) {
      if (r == c.rank()) {
        c.broadcast(std::span<T>(xs[r]), r, Algo::kDirect);
        continue;
      }
      tmp.assign(xs[r].size(), T{});
      c.broadcast(std::span<T>(tmp), r, Algo::kDirect);
      if (c.rank() == world.first_rank() && !world.is_local(r)) xs[r] = tmp;
    }
  });
}

// Runs fn(comm, buf) on every rank, buf being that rank's copy of xs[rank]; returns every
// rank's buffer afterwards.
template <class T, class Fn>
Ranks<T> run_in_place(World& world, Ranks<T> xs, Fn fn) {
  world.run([&](Communicator& c) { fn(c, xs[c.rank()]); });
  share_results(world, xs);
  return xs;
}

// Runs fn(comm, in, out) on every rank with in = xs[rank] and out = a buffer of
// out_size(rank) elements; returns every rank's output.
template <class T, class SizeFn, class Fn>
Ranks<T> run_out_of_place(World& world, const Ranks<T>& xs, SizeFn out_size, Fn fn) {
  Ranks<T> out(xs.size());
  for (size_t r = 0; r < xs.size(); ++r) out[r].assign(out_size(static_cast<int>(r)), T{});
  world.run([&](Communicator& c) { fn(c, xs[c.rank()], out[c.rank()]); });
  share_results(world, out);
  return out;
}

// Short description of a case, for SCOPED_TRACE.
inline std::string describe_case(int n, size_t len, const char* what) {
  std::ostringstream s;
  s << what << " N=" << n << " len=" << len;
  return s.str();
}

// True if `s` contains `part` (for checks on error messages).
inline bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Default WorldOptions with deadline `t`.
inline WorldOptions with_timeout(std::chrono::milliseconds t) {
  WorldOptions o;
  o.timeout = t;
  return o;
}

}  // namespace dtsim::testing
