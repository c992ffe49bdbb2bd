// dtsim walk: runs one collective on N rank threads with the trace on
// (runtime/diagnostics/trace.h), and prints the lesson's "walk the shapes" table in causal order:
// per step, the sends that can happen at once (which rank sent which chunk to whom) and every
// rank's buffer afterwards; then the result against a single-threaded reference and the traffic
// each rank sent, read from the runtime's counters.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/algorithms/registry.h"
#include "runtime/communicator.h"
#include "runtime/job_start.h"
#include "runtime/split.h"
#include "runtime/world.h"
#include "train/cli/commands.h"
#include "train/cli/flags.h"
#include "train/cli/walk_context.h"
#include "train/cli/walk_pipeline.h"
#include "train/cli/walk_sequence.h"

namespace dtsim::cli {
namespace {

// What the command line sets.
struct WalkFlags {
  std::string op, algo;
  int ranks = 4, numel = 8, root = 0;
};

// The help's algorithm list, from the registry.
std::string algorithms_help() {
  std::string s = "\nalgorithms (from the registry):\n";
  for (const AlgoRow& row : algo_rows()) {
    if (row.op == OpKind::kBarrier) continue;
    if (&row == algorithms_of(row.op).front()) {
      s += std::string(to_string(row.op)) + " (auto: " + auto_rule(row.op) + ")\n";
    }
    // A "one step" algorithm sends N - 1 messages per rank in one round; walk, whose ranks
    // send one message at a time, draws that round as N - 1 steps.
    std::string how = row.how;
    if (const size_t at = how.find("one step"); at != std::string::npos) {
      how.replace(at, 8, "one round (N - 1 sends per rank: N - 1 steps in walk)");
    }
    s += "  " + std::string(to_string(row.algo)) + ": " + how +
         (row.needs & kWorldMpi ? " (MPI world only)" : "") + "\n";
  }
  return s;
}

using Vec = std::vector<int64_t>;

int64_t value(int n, size_t numel, int r, size_t i) {
  if (n <= 8 && numel <= 9) {
    int64_t p = 1;
    for (int k = 0; k < r; ++k) p *= 10;
    return static_cast<int64_t>(i + 1) * p;
  }
  return 1000 * r + static_cast<int64_t>(i);
}

// "[1 2 | 3 4]" with a bar between the tensor_split chunks of `parts`.
std::string show(const Vec& v, size_t parts) {
  std::string s = "[";
  size_t chunk = 0, left = parts ? split_size(v.size(), parts, 0) : v.size();
  for (size_t i = 0; i < v.size(); ++i) {
    while (parts && left == 0 && chunk + 1 < parts) left = split_size(v.size(), parts, ++chunk);
    if (i && parts && left == split_size(v.size(), parts, chunk)) s += " |";
    s += (i ? " " : "") + std::to_string(v[i]);
    --left;
  }
  return s + "]";
}

struct Plan {
  std::string op;
  int n;
  size_t numel;
  Algo algo;      // as requested (may be kAuto)
  Algo resolved;  // what the registry runs for it
  int root;
};

// Chunk bars in a full-length buffer of an op that works in chunks (none for broadcast and
// reduce, which move whole buffers).
size_t bars(const Plan& p, const Vec& v) {
  if (p.op == "broadcast" || p.op == "reduce" || v.size() != p.numel) return 0;
  return static_cast<size_t>(p.n);
}

// What rank r holds before the call (its input) and the reference result after it.
Vec input_of(const Plan& p, int r) {
  size_t len = p.op == "all_gather" ? split_size(p.numel, p.n, r) : p.numel;
  size_t base = p.op == "all_gather" ? split_offset(p.numel, p.n, r) : 0;
  Vec v(len);
  for (size_t i = 0; i < len; ++i) v[i] = value(p.n, p.numel, r, base + i);
  return v;
}

Vec reference(const Plan& p, int r) {
  const size_t n = static_cast<size_t>(p.n);
  Vec sum(p.numel, 0);
  for (int q = 0; q < p.n; ++q) {
    Vec x = input_of(p, q);
    for (size_t i = 0; i < x.size() && p.op != "all_gather"; ++i) sum[i] += x[i];
  }
  if (p.op == "all_reduce") return sum;
  if (p.op == "reduce") return r == p.root ? sum : input_of(p, r);
  if (p.op == "broadcast") return input_of(p, p.root);
  if (p.op == "reduce_scatter") {
    return Vec(sum.begin() + split_offset(p.numel, n, r),
               sum.begin() + split_offset(p.numel, n, r) + split_size(p.numel, n, r));
  }
  Vec out;
  if (p.op == "all_gather") {
    for (int q = 0; q < p.n; ++q) {
      Vec x = input_of(p, q);
      out.insert(out.end(), x.begin(), x.end());
    }
    return out;
  }
  for (int q = 0; q < p.n; ++q) {  // all_to_all: chunk r of every rank, in rank order
    Vec x = input_of(p, q);
    out.insert(out.end(), x.begin() + split_offset(p.numel, n, r),
               x.begin() + split_offset(p.numel, n, r) + split_size(p.numel, n, r));
  }
  return out;
}

Vec run_one(const Plan& p, Communicator& c) {
  Vec in = input_of(p, c.rank());
  const size_t n = static_cast<size_t>(p.n);
  const int r = c.rank();
  if (p.op == "all_reduce") {
    c.all_reduce(std::span<int64_t>(in), ReduceOp::kSum, p.algo);
    return in;
  }
  if (p.op == "reduce") {
    c.reduce(std::span<int64_t>(in), p.root, ReduceOp::kSum, p.algo);
    return in;
  }
  if (p.op == "broadcast") {
    c.broadcast(std::span<int64_t>(in), p.root, p.algo);
    return in;
  }
  if (p.op == "reduce_scatter") {
    Vec out(split_size(p.numel, n, r));
    c.reduce_scatter(std::span<const int64_t>(in), std::span<int64_t>(out), ReduceOp::kSum, p.algo);
    return out;
  }
  if (p.op == "all_gather") {
    Vec out(p.numel);
    c.all_gather(std::span<const int64_t>(in), std::span<int64_t>(out), p.algo);
    return out;
  }
  Vec out(n * split_size(p.numel, n, r));
  c.all_to_all(std::span<const int64_t>(in), std::span<int64_t>(out), p.algo);
  return out;
}

// What a send is part of, for composite algorithms ("" for single-phase ones).
std::string phase_name(const Plan& p, const TraceEvent& e) {
  if (p.op != "all_reduce") return "";
  switch (p.resolved) {
    case Algo::kRing:
      return e.tag < p.n - 1 ? "reduce-scatter" : "all-gather";
    case Algo::kTree:
      return e.phase == 0 ? "reduce to 0" : "broadcast from 0";
    case Algo::kDeterministic:
      return e.phase == 0 ? "ordered reduce-scatter" : "all-gather";
    default:
      return "";
  }
}

Vec as_values(const TraceEvent& e) {
  Vec v(e.bytes.size() / sizeof(int64_t));
  if (!v.empty()) std::memcpy(v.data(), e.bytes.data(), e.bytes.size());
  return v;
}

// Step by step, in causal order (runtime/diagnostics/trace.h).
void print_steps(const Plan& p, const World& world) {
  std::vector<const RankTrace*> traces;
  for (int r = 0; r < p.n; ++r) traces.push_back(&world.trace(r));
  const std::vector<CausalStep> steps = causal_steps(traces);
  for (size_t k = 0; k < steps.size(); ++k) {
    const CausalStep& st = steps[k];
    std::string phases;
    for (const TraceEvent& e : st.sends) {
      const std::string ph = phase_name(p, e);
      if (!ph.empty() && phases.find(ph) == std::string::npos) {
        phases += (phases.empty() ? "" : " + ") + ph;
      }
    }
    // The sends, wrapped at 100 columns under the first.
    std::string text = fmt::format("\nstep {}{}:", k, phases.empty() ? "" : " (" + phases + ")");
    const size_t indent = text.size() - 1;
    size_t width = indent;
    for (const TraceEvent& e : st.sends) {
      const std::string send = e.chunk >= 0
                                   ? fmt::format("  {}->{} chunk {}", e.src, e.dst, e.chunk)
                                   : fmt::format("  {}->{} all {}", e.src, e.dst, e.count);
      if (width + send.size() > 100 && width > indent) {
        text += "\n" + std::string(indent, ' ');
        width = indent;
      }
      text += send;
      width += send.size();
    }
    std::printf("%s\n", text.c_str());
    for (int r = 0; r < p.n; ++r) {
      const Vec v = st.after[r] ? as_values(*st.after[r]) : input_of(p, r);
      std::string from;
      for (int src : st.from[r]) from += (from.empty() ? "  <- " : ", ") + std::to_string(src);
      std::printf("  rank %d: %s%s\n", r, show(v, bars(p, v)).c_str(), from.c_str());
    }
  }
}

int run_walk(const WalkFlags& f) {
  if (f.op.empty()) fail("walk", "--op is required (the collective; or --pp for a pipeline)");
  Plan p;
  p.op = f.op;
  p.n = f.ranks;
  p.numel = static_cast<size_t>(f.numel);
  if (f.root >= p.n) {
    fail("walk", fmt::format("--root must be between 0 and {} (got {}): roots are ranks of "
                             "--ranks {}",
                             p.n - 1, f.root, p.n));
  }
  p.root = f.root;
  OpKind op = OpKind::kAllReduce;
  parse_collective(p.op, &op);
  // AlgoFor() accepted --algo for this op.
  parse_algo(f.algo.empty() ? (p.op == "all_reduce" ? "ring" : "auto") : f.algo, &p.algo);
  p.resolved = resolve_algorithm(op, p.algo, p.numel * sizeof(int64_t), p.n);
  begin_work();

  WorldOptions opts;
  opts.trace = true;
  opts.timeout = std::chrono::milliseconds(10000);
  World world(p.n, opts);
  std::vector<Vec> results(p.n);
  world.run([&](Communicator& c) { results[c.rank()] = run_one(p, c); });
  // What ran, from the counters: `shared` below the lend size runs as `deterministic`.
  const Algo asked = p.algo == Algo::kAuto ? p.resolved : p.algo;
  const OpCounters& ran = world.counters(0)[op];
  for (int a = 0; a < static_cast<int>(ran.algo_calls.size()); ++a) {
    if (ran.algo_calls[a] > 0) p.resolved = static_cast<Algo>(a);
  }

  const size_t n = static_cast<size_t>(p.n);
  std::printf("%s, algo %s%s, %d ranks, %zu elements per rank", p.op.c_str(), to_string(p.resolved),
              p.algo == Algo::kAuto ? " (auto)" : "", p.n, p.numel);
  if (p.op == "broadcast" || p.op == "reduce") {
    std::printf(" (whole buffers, root %d)\n", p.root);  // no chunks: a message is a buffer
  } else {
    std::printf(" (chunks of");
    for (size_t i = 0; i < n; ++i) std::printf(" %zu", split_size(p.numel, n, i));
    std::printf(")\n");
  }
  if (asked != p.resolved) {  // e.g. shared, which lends buffers of the lend size or more
    std::printf(
        "note: --algo %s runs as %s here: it needs buffers of %zu KiB or more (the lend\n"
        "size), and walk's are %zu bytes\n",
        to_string(asked), to_string(p.resolved), opts.lend_bytes >> 10, p.numel * sizeof(int64_t));
  }
  std::printf("\ninputs\n");
  for (int r = 0; r < p.n; ++r) {
    std::printf("  rank %d: %s\n", r, show(input_of(p, r), bars(p, input_of(p, r))).c_str());
  }

  print_steps(p, world);

  bool ok = true;
  std::printf("\nresults (checked against a single-threaded reference)\n");
  for (int r = 0; r < p.n; ++r) {
    const bool same = results[r] == reference(p, r);
    ok = ok && same;
    std::printf("  rank %d: %s %s\n", r, show(results[r], bars(p, results[r])).c_str(),
                same ? "ok" : "WRONG");
  }
  uint64_t total = 0;
  std::printf("\ntraffic (from the runtime's counters)\n");
  for (int r = 0; r < p.n; ++r) {
    const OpCounters c = world.counters(r).total();
    total += c.bytes_sent;
    std::printf("  rank %d sent %llu elements (%llu bytes) in %llu messages over %llu steps\n", r,
                static_cast<unsigned long long>(c.bytes_sent / sizeof(int64_t)),
                static_cast<unsigned long long>(c.bytes_sent),
                static_cast<unsigned long long>(c.msgs_sent),
                static_cast<unsigned long long>(c.steps));
  }
  std::printf("  total %llu elements", static_cast<unsigned long long>(total / sizeof(int64_t)));
  if (p.op == "all_reduce" && (p.resolved == Algo::kRing || p.resolved == Algo::kDeterministic)) {
    std::printf(" = 2(N - 1) x numel = %zu", 2 * (n - 1) * p.numel);
  }
  std::printf("\n");
  return ok ? 0 : 1;
}

}  // namespace

Command add_walk(CLI::App& dtsim) {
  CLI::App* app = dtsim.add_subcommand(
      "walk", "print a collective step by step: who sends which chunk to whom");
  describe(app,
           "Runs one collective with the trace on and prints it in causal order: a step is the\n"
           "set of sends that can happen at once (each rank sends one message at a time, and\n"
           "only what it has received by then), with every rank's buffer after it; then the\n"
           "traffic. A rank marked '<- 0' received from rank 0 in that step.\n"
           "Inputs are chosen so sums can be checked by eye: with N <= 8 and K <= 9, element i of\n"
           "rank r is (i + 1) * 10^r, so 1111 means ranks 0-3 all contributed.");
  app->option_defaults()->always_capture_default();
  app->fallthrough();  // --config belongs to dtsim
  auto f = std::make_shared<WalkFlags>();
  const std::vector<std::string> ops = {"all_reduce", "reduce_scatter", "all_gather",
                                        "all_to_all", "broadcast",      "reduce"};
  std::vector<OpKind> op_kinds;
  for (const std::string& name : ops) parse_collective(name, &op_kinds.emplace_back());
  app->add_option("--op", f->op, "the collective")->check(OneOf(ops));
  app->add_option("--ranks", f->ranks, "number of rank threads")->transform(Integer(1, 16));
  app->add_option("--numel", f->numel, "elements per rank")->transform(Integer(0, 64));
  // Checked against --op's algorithms (declared above, so parsed first); walk runs in
  // the thread world.
  app->add_option("--algo", f->algo,
                  "the op's algorithms, below [default: ring for all_reduce, else auto]")
      ->check(AlgoFor(
          [f] {
            OpKind op = OpKind::kAllReduce;
            parse_collective(f->op, &op);
            return op;
          },
          [] { return uint8_t{kWorldBasic}; }, /*name_op=*/true, op_kinds))
      ->default_str("");
  app->add_option("--root", f->root, "source of broadcast / destination of reduce")
      ->transform(Integer(0, 15));
  const auto pipeline = add_walk_pipeline(app);  // --pp ...: walk_pipeline.cc
  const auto context = add_walk_context(app);    // --cp: walk_context.cc
  const auto sequence = add_walk_sequence(app);  // --tp --sequence-parallel: walk_sequence.cc
  app->footer(
      "example: dtsim walk --op all_reduce --ranks 4 --numel 8\n"
      "         dtsim walk --pp 4 --micro-batches 8 --schedule 1f1b\n"
      "         dtsim walk --cp 4\n"
      "         dtsim walk --tp 4 --sequence-parallel\n" +
      algorithms_help());
  return {app, [f, pipeline, context, sequence] {
            if (const std::optional<int> code = sequence()) return *code;
            if (const std::optional<int> code = context()) return *code;
            if (const std::optional<int> code = pipeline()) return *code;
            return run_walk(*f);
          }};
}

}  // namespace dtsim::cli
