// The algorithm registry: the one table of which collective runs which algorithm. Each
// row is (collective, algorithm, function, deterministic or not, what the world must
// provide); each algorithm has one name (and at most one alias) in one table. The
// communicator's dispatch, parse_algo / to_string(Algo), the stress fuzzer, the bench
// harness, the training strategies, the CLI's help and validation and the tests all read
// these tables: a new algorithm is one file (algorithms.h) plus its rows in registry.cc.
//
// Thread safety: the tables are immutable; every function is safe for concurrent use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "runtime/types.h"

namespace dtsim {

class Exchange;
struct Reducer;

// The buffers of one collective call, as a row's function receives them.
struct CollArgs {
  const void* in = nullptr;  // reduce_scatter, all_gather, all_to_all: the input
  void* data = nullptr;      // the in-place buffer (all_reduce, broadcast, reduce) or output
  size_t count = 0;  // in place: its elements; reduce_scatter: input's; all_gather: output's
  int root = -1;     // broadcast source, reduce destination
  const Reducer* red = nullptr;
  const size_t* send_counts = nullptr;  // all_to_all: per peer, in elements
  const size_t* recv_counts = nullptr;
};
using AlgoFn = void (*)(Exchange& ex, const CollArgs& args);

struct AlgoRow {
  OpKind op;
  Algo algo;
  AlgoFn run;
  // Reductions sum every element in rank order 0..N-1: bitwise a sequential sum, run
  // after run, whatever the timing. Collectives that only move data are always exact.
  bool deterministic;
  uint8_t needs;    // WorldFeature bits the world must provide
  const char* how;  // one line for --help: the schedule and its cost
};

struct AlgoName {
  Algo algo;
  const char* name;   // what to_string(Algo) prints and parse_algo reads
  const char* alias;  // another spelling parse_algo accepts, or nullptr
};

// Every algorithm's name (kAuto first), and every row, grouped by collective.
std::span<const AlgoName> algo_names();
std::span<const AlgoRow> algo_rows();
// The collectives that take an algorithm, in the order of algo_rows().
std::span<const OpKind> collectives();

// The rows of `op` (empty for ops that take no algorithm, like send).
std::vector<const AlgoRow*> algorithms_of(OpKind op);
// The row of (op, algo), or nullptr; kAuto has no row (resolve it first).
const AlgoRow* find_algorithm(OpKind op, Algo algo);
// Whether `op` accepts `algo` (kAuto always).
bool has_algorithm(OpKind op, Algo algo);
// The algorithm kAuto picks for `op` on a message of `bytes` among `ranks` ranks (the
// communicator's size); other algorithms unchanged.
Algo resolve_algorithm(OpKind op, Algo algo, size_t bytes, int ranks);
// What kAuto picks for `op`, in words ("direct up to 64 B at 3 to 32 ranks, rd up to
// 32 KiB, else shared"), for --help.
std::string auto_rule(OpKind op);
// `algo` if `op` has it, else kAuto: for callers with one algorithm setting for several
// collectives (ZeRO's reduce-scatter and all-gather follow the config's all-reduce one).
Algo algorithm_or_auto(OpKind op, Algo algo);
// "ring, rd, tree, direct or deterministic" (with "auto" first when with_auto): the
// algorithms of `op` that a world with `world` features can run.
std::string algorithm_list(OpKind op, bool with_auto = true, uint8_t world = kWorldBasic);
// The usage error for an algorithm `op` does not have, or that `world` cannot run; empty
// when (op, algo) is fine. One line, naming what to pass instead.
std::string algorithm_error(OpKind op, Algo algo, uint8_t world = kWorldBasic);
// Resolves kAuto (for `ranks` ranks) and returns the row; throws UsageError
// (algorithm_error) otherwise.
const AlgoRow& algorithm_for(OpKind op, Algo algo, size_t bytes, int ranks,
                             uint8_t world = kWorldBasic);
// Parses a collective's torch name ("all_reduce", ...), for the CLI.
bool parse_collective(const std::string& s, OpKind* out);

}  // namespace dtsim
