// dtsim stress: shakes race conditions out of the collectives. Runs random sequences of
// collectives (runtime/stress.h) on N rank threads with seeded jitter, checks every result
// against a single-threaded reference, and on a failure prints the seed and iteration
// that reproduce it. Exit code 0 when clean, 1 on any failure.
#include <chrono>
#include <cstdio>
#include <string>

#include "runtime/stress.h"
#include "train/cli/args.h"
#include "train/cli/commands.h"
#include "train/cli/stress_explore.h"

namespace dtsim::cli {
namespace {

const char* kHelp =
    "usage: dtsim stress [--ranks N] [--iterations K] [--seed S] [--start I]\n"
    "                    [--jitter-us U] [--calls C] [--max-numel M] [--timeout-ms T]\n"
    "                    [--unsafe-live-sends] [--keep-going] [--report]\n"
    "                    [--scheduler jitter|random|pct] [--depth D] [--schedules K]\n"
    "                    [--mutant NAME] [--schedule-file F] [--replay F]\n"
    "\n"
    "Runs K iterations of C random collectives each (all_reduce, reduce_scatter, all_gather,\n"
    "broadcast, reduce, all_to_all, all_to_all_single, barrier; random lengths including 0\n"
    "and uneven ones, algorithms, roots, reduce ops, dtypes, subgroups from new_group and\n"
    "split) on N rank threads, with random yields and sleeps of up to U us in the transport.\n"
    "Every result is checked against a single-threaded reference; the deterministic\n"
    "algorithms run twice and must match bitwise. Iteration I depends only on (S, I).\n"
    "\n"
    "  --ranks              rank threads, 1..256 (default 8)\n"
    "  --iterations         iterations to run (default 20)\n"
    "  --seed               plan and jitter seed (default 1)\n"
    "  --start              first iteration, to reproduce a failure (default 0)\n"
    "  --jitter-us          max injected sleep in microseconds, 0 = none (default 50)\n"
    "  --calls              collectives per iteration (default 16)\n"
    "  --max-numel          typical max length; one call in ten is up to 8x (default 2048)\n"
    "  --timeout-ms         deadline of a blocked collective (default 10000)\n"
    "  --unsafe-live-sends  break the snapshot rule on purpose: stress must catch it\n"
    "  --keep-going         continue after a failing iteration\n"
    "  --report             on failure, print every rank's flight recorder\n"
    "  --scheduler          jitter (default): free-running threads with injected jitter;\n"
    "                       random, pct: one rank at a time under a controlled scheduler\n"
    "                       choosing every interleaving from the seed (exact replay)\n"
    "  --depth              PCT bug depth d: d - 1 priority change points (default 3)\n"
    "  --schedules          under --scheduler: schedules to explore (an iteration each)\n"
    "  --mutant             plant a bug that stress must find: lend-overwrite,\n"
    "                       missing-settle, ring-wrong-chunk, split-off-by-one,\n"
    "                       recv-wrong-step, lend-claim-race\n"
    "  --schedule-file      where a failing schedule is written (dtsim-schedule-S-I.txt)\n"
    "  --replay             replay a schedule file exactly\n"
    "  --same-plan          run every schedule on plan --start and count the failing ones\n"
    "                       (a mutant's hit rate per schedule, for any --scheduler)\n"
    "\n"
    "example: dtsim stress --ranks 8 --iterations 50 --seed 7 --jitter-us 50\n";

}  // namespace

int stress_main(const Words& words) {
  for (const auto& w : words) {
    if (w == "--help" || w == "-h") {
      std::fputs(kHelp, stdout);
      return 0;
    }
  }
  Args args("stress", words,
            {"ranks", "iterations", "seed", "start", "jitter-us", "calls", "max-numel",
             "timeout-ms", "scheduler", "depth", "schedules", "mutant", "schedule-file", "replay"},
            {"unsafe-live-sends", "keep-going", "report", "same-plan"});
  StressOptions o;
  o.ranks = static_cast<int>(args.integer("ranks", 8, 1, 256));
  o.iterations = static_cast<int>(args.integer("iterations", 20, 1, 100000000));
  o.seed = static_cast<uint64_t>(args.integer("seed", 1, 0, INT64_MAX));
  o.first_iteration = static_cast<int>(args.integer("start", 0, 0, 1000000000));
  o.jitter_us = static_cast<uint32_t>(args.integer("jitter-us", 50, 0, 100000));
  o.calls_per_iteration = static_cast<int>(args.integer("calls", 16, 1, 100000));
  o.max_numel = static_cast<size_t>(args.integer("max-numel", 2048, 1, 1 << 24));
  o.timeout = std::chrono::milliseconds(args.integer("timeout-ms", 10000, 1, 3600000));
  o.unsafe_live_sends = args.on("unsafe-live-sends");
  o.keep_going = args.on("keep-going");
  if (!parse_mutant(args.str("mutant", "none"), &o.mutant)) {
    fail("stress", "unknown --mutant " + args.str("mutant", "") + "; use one of " + mutant_names());
  }
  ExploreFlags ef;
  const std::string sched = args.choice("scheduler", "jitter", {"jitter", "random", "pct"});
  ef.scheduler = sched;
  ef.depth = static_cast<int>(args.integer("depth", 3, 1, 16));
  ef.replay = args.str("replay", "");
  ef.schedule_file = args.str("schedule-file", "");
  ef.same_plan = args.on("same-plan");
  ef.report = args.on("report");
  if (sched != "jitter" || !ef.replay.empty() || ef.same_plan) {
    o.iterations = static_cast<int>(args.integer("schedules", 100, 1, 100000000));
    return explore_stress(o, ef);
  }

  std::printf("dtsim stress: %d ranks, iterations %d..%d, seed %llu, jitter %u us%s\n", o.ranks,
              o.first_iteration, o.first_iteration + o.iterations - 1,
              static_cast<unsigned long long>(o.seed), o.jitter_us,
              o.unsafe_live_sends ? ", UNSAFE live sends (snapshot rule broken on purpose)" : "");
  const auto t0 = std::chrono::steady_clock::now();
  const StressResult r = run_stress(o);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "iterations: %d\ncollectives checked: %llu (%llu per-rank results)\nfailures: %llu\n"
      "time: %.2f s\n",
      r.iterations, static_cast<unsigned long long>(r.collectives),
      static_cast<unsigned long long>(r.results_checked),
      static_cast<unsigned long long>(r.failures), secs);
  if (r.ok()) return 0;
  for (const auto& m : r.messages) std::printf("FAIL %s\n", m.c_str());
  if (args.on("report")) std::printf("flight recorder:\n%s", r.flight_report.c_str());
  std::printf(
      "reproduce: dtsim stress --ranks %d --seed %llu --start %d --iterations 1 --jitter-us %u "
      "--calls %d --max-numel %zu%s\n",
      o.ranks, static_cast<unsigned long long>(o.seed), r.first_failed_iteration, o.jitter_us,
      o.calls_per_iteration, o.max_numel, o.unsafe_live_sends ? " --unsafe-live-sends" : "");
  return 1;
}

}  // namespace dtsim::cli
