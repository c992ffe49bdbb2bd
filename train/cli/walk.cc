// dtsim walk: runs one collective on N rank threads with the lockstep trace on, and
// prints the lesson's "walk the shapes" table: per step, which rank sent which chunk to
// whom and every rank's buffer afterwards; then the result against a single-threaded
// reference and the traffic each rank sent, read from the runtime's counters.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "runtime/communicator.h"
#include "runtime/split.h"
#include "runtime/world.h"
#include "train/cli/commands.h"
#include "train/cli/flags.h"
#include "train/cli/walk_pipeline.h"

namespace dtsim::cli {
namespace {

// What the command line sets.
struct WalkFlags {
  std::string op, algo;
  int ranks = 4, numel = 8, root = 0;
};

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
  Algo algo;
  int root;
};

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
  c.all_to_all(std::span<const int64_t>(in), std::span<int64_t>(out));
  return out;
}

std::string phase_name(const Plan& p, int phase, int step) {
  if (p.op == "all_reduce" && p.algo == Algo::kRing) {
    return step < p.n - 1 ? "reduce-scatter" : "all-gather";
  }
  if (p.op == "all_reduce" && (p.algo == Algo::kDeterministic || p.algo == Algo::kTree)) {
    if (p.algo == Algo::kTree) return phase == 0 ? "reduce to 0" : "broadcast from 0";
    return phase == 0 ? "ordered reduce-scatter" : "all-gather";
  }
  return p.op;
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
  const std::string algo = f.algo.empty() ? (p.op == "all_reduce" ? "ring" : "auto") : f.algo;
  parse_algo(algo, &p.algo);  // OneOf(algo_names()) accepted it

  WorldOptions opts;
  opts.trace = true;
  opts.timeout = std::chrono::milliseconds(10000);
  World world(p.n, opts);
  std::vector<Vec> results(p.n);
  world.run([&](Communicator& c) { results[c.rank()] = run_one(p, c); });

  const size_t n = static_cast<size_t>(p.n);
  std::printf("%s, algo %s, %d ranks, %zu elements per rank (chunks of", p.op.c_str(),
              to_string(p.algo), p.n, p.numel);
  for (size_t i = 0; i < n; ++i) std::printf(" %zu", split_size(p.numel, n, i));
  std::printf(")\n\ninputs\n");
  for (int r = 0; r < p.n; ++r) {
    std::printf("  rank %d: %s\n", r, show(input_of(p, r), p.op == "all_gather" ? 0 : n).c_str());
  }

  // Group every rank's sends and snapshots by (phase, step).
  std::map<std::pair<int, int>, std::vector<TraceSend>> sends;
  std::map<std::pair<int, int>, std::map<int, Vec>> after;
  for (int r = 0; r < p.n; ++r) {
    for (const TraceSend& s : world.trace(r).sends) sends[{s.phase, s.step}].push_back(s);
    for (const TraceSnapshot& s : world.trace(r).snapshots) {
      Vec v(s.bytes.size() / sizeof(int64_t));
      std::memcpy(v.data(), s.bytes.data(), s.bytes.size());
      after[{s.phase, s.step}][r] = v;
    }
  }
  std::set<std::pair<int, int>> steps;
  for (auto& [k, v] : sends) steps.insert(k);
  for (auto& [k, v] : after) steps.insert(k);
  int shown = 0;
  for (const auto& key : steps) {
    std::printf("\nstep %d (%s):", shown++, phase_name(p, key.first, key.second).c_str());
    for (const TraceSend& s : sends[key]) {
      if (s.chunk >= 0) {
        std::printf("  %d->%d chunk %d", s.src, s.dst, s.chunk);
      } else {
        std::printf("  %d->%d all %zu", s.src, s.dst, s.count);
      }
    }
    std::printf("\n");
    for (auto& [r, v] : after[key]) {
      std::printf("  rank %d: %s\n", r, show(v, v.size() == p.numel ? n : 0).c_str());
    }
  }

  bool ok = true;
  std::printf("\nresults (checked against a single-threaded reference)\n");
  for (int r = 0; r < p.n; ++r) {
    const bool same = results[r] == reference(p, r);
    ok = ok && same;
    std::printf("  rank %d: %s %s\n", r,
                show(results[r], results[r].size() == p.numel ? n : 0).c_str(),
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
  if (p.op == "all_reduce" && (p.algo == Algo::kRing || p.algo == Algo::kDeterministic)) {
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
           "Runs one collective with the lockstep trace on and prints, step by step, which rank\n"
           "sends which chunk to whom and every rank's buffer afterwards, then the traffic.\n"
           "Inputs are chosen so sums can be checked by eye: with N <= 8 and K <= 9, element i of\n"
           "rank r is (i + 1) * 10^r, so 1111 means ranks 0-3 all contributed.");
  app->option_defaults()->always_capture_default();
  app->fallthrough();  // --config belongs to dtsim
  auto f = std::make_shared<WalkFlags>();
  app->add_option("--op", f->op, "the collective")
      ->check(OneOf(
          {"all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "reduce"}));
  app->add_option("--ranks", f->ranks, "number of rank threads")->transform(Integer(1, 16));
  app->add_option("--numel", f->numel, "elements per rank")->transform(Integer(0, 64));
  app->add_option("--algo", f->algo, "[default: the op's usual one]")
      ->check(OneOf(algo_names()))
      ->default_str("");
  app->add_option("--root", f->root, "source of broadcast / destination of reduce")
      ->transform(Integer(0, 15));
  const auto pipeline = add_walk_pipeline(app);  // --pp ...: walk_pipeline.cc
  app->footer(
      "example: dtsim walk --op all_reduce --ranks 4 --numel 8\n"
      "         dtsim walk --pp 4 --micro-batches 8 --schedule 1f1b");
  return {app, [f, pipeline] {
            if (const std::optional<int> code = pipeline()) return *code;
            return run_walk(*f);
          }};
}

}  // namespace dtsim::cli
