#include "runtime/algorithms/registry.h"

#include <array>

#include "runtime/algorithms/algorithms.h"
#include "runtime/diagnostics/counters.h"

namespace dtsim {
namespace {

// Below this many bytes all_reduce is latency-bound: recursive doubling beats the ring;
// above, `shared` moves the fewest bytes (bench/RESULTS.md, the busbw note).
constexpr size_t kSmallAllReduceBytes = 32 * 1024;
// Up to this many bytes, at kMinDirectRanks..kMaxDirectRanks ranks, all_reduce is one step
// of direct sends (rank-order sums) rather than ceil(log2 N) rd rounds: with ranks
// outnumbering cores each round waits for its partner to be scheduled, and N - 1 sends of
// a few bytes cost less than that. Direct was faster at 8-64 B for N = 3 to 32 and lost
// from 256-512 B at N = 4 and 8 and at 8 B for N = 64; at N = 2 both are one exchange
// (bench/RESULTS.md, "8-byte all_reduce latency").
constexpr size_t kTinyAllReduceBytes = 64;
constexpr int kMinDirectRanks = 3;
constexpr int kMaxDirectRanks = 32;

constexpr AlgoName kNames[] = {
    // every Algo, in enum order
    {Algo::kAuto, "auto", nullptr},
    {Algo::kRing, "ring", nullptr},
    {Algo::kRecursiveDoubling, "rd", "recursive_doubling"},
    {Algo::kTree, "tree", nullptr},
    {Algo::kDirect, "direct", nullptr},
    {Algo::kDeterministic, "deterministic", nullptr},
    {Algo::kDissemination, "dissemination", nullptr},
    {Algo::kMpi, "mpi", nullptr},
    {Algo::kShared, "shared", nullptr},
};

// The rows' functions: unpack CollArgs for each algorithm's own signature.
void ar_ring(Exchange& ex, const CollArgs& a) { all_reduce_ring(ex, a.data, a.count, *a.red); }
void ar_rd(Exchange& ex, const CollArgs& a) {
  all_reduce_recursive_doubling(ex, a.data, a.count, *a.red);
}
void ar_tree(Exchange& ex, const CollArgs& a) { all_reduce_tree(ex, a.data, a.count, *a.red); }
void ar_direct(Exchange& ex, const CollArgs& a) { all_reduce_direct(ex, a.data, a.count, *a.red); }
void ar_det(Exchange& ex, const CollArgs& a) {
  all_reduce_deterministic(ex, a.data, a.count, *a.red);
}
void ar_shared(Exchange& ex, const CollArgs& a) { all_reduce_shared(ex, a.data, a.count, *a.red); }
void rs_ring(Exchange& ex, const CollArgs& a) {
  reduce_scatter_ring(ex, a.in, a.count, a.data, *a.red);
}
void rs_ordered(Exchange& ex, const CollArgs& a) {
  reduce_scatter_ordered(ex, a.in, a.count, a.data, *a.red);
}
void ag_ring(Exchange& ex, const CollArgs& a) { all_gather_ring(ex, a.in, a.data, a.count); }
void ag_direct(Exchange& ex, const CollArgs& a) { all_gather_direct(ex, a.in, a.data, a.count); }
void bc_tree(Exchange& ex, const CollArgs& a) { broadcast_tree(ex, a.data, a.count, a.root); }
void bc_direct(Exchange& ex, const CollArgs& a) { broadcast_direct(ex, a.data, a.count, a.root); }
void rd_tree(Exchange& ex, const CollArgs& a) { reduce_tree(ex, a.data, a.count, a.root, *a.red); }
void rd_ordered(Exchange& ex, const CollArgs& a) {
  reduce_ordered(ex, a.data, a.count, a.root, *a.red);
}
void a2a_pairwise(Exchange& ex, const CollArgs& a) {
  all_to_all_pairwise(ex, a.in, a.send_counts, a.data, a.recv_counts);
}
void barrier(Exchange& ex, const CollArgs&) { barrier_dissemination(ex); }
// The MPI library's own collective (native_collectives.h); all_reduce's `in` is null. MPI
// checks no signature (a mismatched call aborts inside MPI, or worse), so dtsim checks first:
// one empty message around the ring, whose receive compares the predecessor's signature with
// this rank's (the transport's mismatch check), then a barrier, so that no rank enters MPI
// unless every rank's check passed (a rank that failed it never enters the barrier; the
// others are aborted in it).
void mpi(Exchange& ex, const CollArgs& a) {
  const int n = ex.size();
  if (n > 1) {
    ex.send((ex.rank() + 1) % n, 0, nullptr, 0);
    ex.recv_copy((ex.rank() + n - 1) % n, 0, nullptr, 0);
    ex.begin_phase();
    barrier_dissemination(ex);
  }
  ex.run_native(a.in, a.data, a.count);
}

// clang-format off
constexpr AlgoRow kRows[] = {
  {OpKind::kAllReduce, Algo::kRing, ar_ring, false, kWorldBasic,
   "reduce-scatter then all-gather around the ring: 2(N-1) steps, 2(N-1)/N of the data"},
  {OpKind::kAllReduce, Algo::kRecursiveDoubling, ar_rd, false, kWorldBasic,
   "whole-buffer exchanges with partners 2^k apart: ceil(log2 N) (+2) steps"},
  {OpKind::kAllReduce, Algo::kTree, ar_tree, false, kWorldBasic,
   "binomial-tree reduce to rank 0, then binomial-tree broadcast: 2 ceil(log2 N) steps"},
  {OpKind::kAllReduce, Algo::kDirect, ar_direct, true, kWorldBasic,
   "everyone sends everything to everyone, summed in rank order: (N-1) x the data"},
  {OpKind::kAllReduce, Algo::kDeterministic, ar_det, true, kWorldBasic,
   "ordered reduce-scatter then ring all-gather: the ring's traffic, sums in rank order"},
  {OpKind::kAllReduce, Algo::kShared, ar_shared, true, kWorldBasic,
   "rank r sums chunk r of all N buffers in rank order, writing it into all: 2 steps"},
  {OpKind::kAllReduce, Algo::kMpi, mpi, false, kWorldMpi,
   "the MPI library's own collective (MPI_Iallreduce, in place)"},
  {OpKind::kReduceScatter, Algo::kRing, rs_ring, false, kWorldBasic,
   "partial sums passed around the ring: N-1 steps, (N-1)/N of the data"},
  {OpKind::kReduceScatter, Algo::kDirect, rs_ordered, true, kWorldBasic,
   "chunk j straight to rank j, summed there in rank order: one step"},
  {OpKind::kReduceScatter, Algo::kDeterministic, rs_ordered, true, kWorldBasic,
   "the same as direct: sums in rank order"},
  {OpKind::kReduceScatter, Algo::kMpi, mpi, false, kWorldMpi,
   "the MPI library's own collective (MPI_Ireduce_scatter, chunks as tensor_split)"},
  {OpKind::kAllGather, Algo::kRing, ag_ring, true, kWorldBasic,
   "chunks passed around the ring: N-1 steps, (N-1)/N of the output"},
  {OpKind::kAllGather, Algo::kDirect, ag_direct, true, kWorldBasic,
   "every rank sends its chunk to every other: one step"},
  {OpKind::kAllGather, Algo::kMpi, mpi, true, kWorldMpi,
   "the MPI library's own collective (MPI_Iallgatherv, chunks as tensor_split)"},
  {OpKind::kBroadcast, Algo::kTree, bc_tree, true, kWorldBasic,
   "binomial tree from the root: ceil(log2 N) steps"},
  {OpKind::kBroadcast, Algo::kDirect, bc_direct, true, kWorldBasic,
   "the root sends to every other rank"},
  {OpKind::kBroadcast, Algo::kMpi, mpi, true, kWorldMpi,
   "the MPI library's own collective (MPI_Ibcast)"},
  {OpKind::kReduce, Algo::kTree, rd_tree, false, kWorldBasic,
   "binomial tree into the root: ceil(log2 N) steps"},
  {OpKind::kReduce, Algo::kDirect, rd_ordered, true, kWorldBasic,
   "every rank sends to the root, which sums in rank order"},
  {OpKind::kReduce, Algo::kDeterministic, rd_ordered, true, kWorldBasic,
   "the same as direct: sums in rank order"},
  {OpKind::kReduce, Algo::kMpi, mpi, false, kWorldMpi,
   "the MPI library's own collective (MPI_Ireduce into the root)"},
  {OpKind::kAllToAll, Algo::kDirect, a2a_pairwise, true, kWorldBasic,
   "pairwise exchange: in step s rank r sends to r+s and receives from r-s, N-1 steps"},
  {OpKind::kBarrier, Algo::kDissemination, barrier, true, kWorldBasic,
   "round k: signal r+2^k, wait for r-2^k; ceil(log2 N) rounds"},
};
// clang-format on

constexpr OpKind kCollectives[] = {OpKind::kAllReduce, OpKind::kReduceScatter, OpKind::kAllGather,
                                   OpKind::kBroadcast, OpKind::kReduce,        OpKind::kAllToAll,
                                   OpKind::kBarrier};

bool world_has(uint8_t world, const AlgoRow& row) { return (row.needs & ~world) == 0; }

// (op, algo) -> row, so that a collective call finds its row without a scan.
constexpr int kMaxAlgos = kAlgoSlots;
static_assert(
    [] {
      for (const AlgoName& n : kNames) {
        if (static_cast<int>(n.algo) >= kMaxAlgos) return false;
      }
      return true;
    }(),
    "raise kMaxAlgos");
using Index = std::array<std::array<const AlgoRow*, kMaxAlgos>, kNumOpKinds>;
const Index& index() {
  static const Index idx = [] {
    Index i{};
    for (const AlgoRow& r : kRows) {
      i[static_cast<int>(r.op)][static_cast<int>(r.algo)] = &r;
    }
    return i;
  }();
  return idx;
}

}  // namespace

std::span<const AlgoName> algo_names() { return kNames; }
std::span<const AlgoRow> algo_rows() { return kRows; }
std::span<const OpKind> collectives() { return kCollectives; }

std::vector<const AlgoRow*> algorithms_of(OpKind op) {
  std::vector<const AlgoRow*> out;
  for (const AlgoRow& r : kRows) {
    if (r.op == op) out.push_back(&r);
  }
  return out;
}

const AlgoRow* find_algorithm(OpKind op, Algo algo) {
  const int o = static_cast<int>(op), a = static_cast<int>(algo);
  if (o < 0 || o >= kNumOpKinds || a >= kMaxAlgos) return nullptr;
  return index()[o][a];
}

bool has_algorithm(OpKind op, Algo algo) {
  return algo == Algo::kAuto || find_algorithm(op, algo) != nullptr;
}

Algo resolve_algorithm(OpKind op, Algo algo, size_t bytes, int ranks) {
  if (algo != Algo::kAuto) return algo;
  switch (op) {
    case OpKind::kAllReduce:
      if (bytes <= kTinyAllReduceBytes && ranks >= kMinDirectRanks && ranks <= kMaxDirectRanks) {
        return Algo::kDirect;
      }
      return bytes <= kSmallAllReduceBytes ? Algo::kRecursiveDoubling : Algo::kShared;
    case OpKind::kBroadcast:
    case OpKind::kReduce:
      return Algo::kTree;
    case OpKind::kAllToAll:
      return Algo::kDirect;
    case OpKind::kBarrier:
      return Algo::kDissemination;
    default:
      return Algo::kRing;
  }
}

std::string auto_rule(OpKind op) {
  const Algo fixed = resolve_algorithm(op, Algo::kAuto, 0, 2);
  if (op == OpKind::kAllReduce) {
    return std::string(to_string(resolve_algorithm(op, Algo::kAuto, 0, kMinDirectRanks))) +
           " up to " + std::to_string(kTinyAllReduceBytes) + " B at " +
           std::to_string(kMinDirectRanks) + " to " + std::to_string(kMaxDirectRanks) + " ranks, " +
           to_string(fixed) + " up to " + std::to_string(kSmallAllReduceBytes / 1024) +
           " KiB, else " + to_string(resolve_algorithm(op, Algo::kAuto, SIZE_MAX, 2));
  }
  return to_string(fixed);
}

Algo algorithm_or_auto(OpKind op, Algo algo) {
  return find_algorithm(op, algo) ? algo : Algo::kAuto;
}

std::string algorithm_list(OpKind op, bool with_auto, uint8_t world) {
  std::vector<const char*> names;
  if (with_auto) names.push_back("auto");
  for (const AlgoRow* r : algorithms_of(op)) {
    if (world_has(world, *r)) names.push_back(to_string(r->algo));
  }
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i) s += i + 1 == names.size() ? " or " : ", ";
    s += names[i];
  }
  return s;
}

std::string algorithm_error(OpKind op, Algo algo, uint8_t world) {
  if (algo == Algo::kAuto) return {};
  const AlgoRow* row = find_algorithm(op, algo);
  if (row == nullptr) {
    return std::string(to_string(op)) + " has no '" + to_string(algo) + "' algorithm; use " +
           algorithm_list(op, true, world);
  }
  if (!world_has(world, *row)) {
    return std::string(to_string(op)) + " '" + to_string(algo) +
           "' runs only in an MPI world of one rank per process (mpirun -np N, without "
           "--threads-per-process); here use " +
           algorithm_list(op, true, world);
  }
  return {};
}

const AlgoRow& algorithm_for(OpKind op, Algo algo, size_t bytes, int ranks, uint8_t world) {
  const Algo a = resolve_algorithm(op, algo, bytes, ranks);
  const AlgoRow* row = find_algorithm(op, a);
  if (row == nullptr || !world_has(world, *row)) throw UsageError(algorithm_error(op, a, world));
  return *row;
}

bool parse_collective(const std::string& s, OpKind* out) {
  for (OpKind op : kCollectives) {
    if (s == to_string(op)) {
      *out = op;
      return true;
    }
  }
  return false;
}

const char* to_string(Algo a) {
  for (const AlgoName& n : kNames) {
    if (n.algo == a) return n.name;
  }
  return "?";
}

bool parse_algo(const std::string& s, Algo* out) {
  for (const AlgoName& n : kNames) {
    if (s == n.name || (n.alias && s == n.alias)) {
      *out = n.algo;
      return true;
    }
  }
  return false;
}

}  // namespace dtsim
