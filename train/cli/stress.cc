// dtsim stress: shakes race conditions out of the collectives. Runs random sequences of
// collectives (runtime/stress/stress.h) on N rank threads with seeded jitter, checks every result
// against a single-threaded reference, and on a failure prints the seed and iteration
// that reproduce it. --report FILE writes the outcome as JSON, with every rank's flight
// recorder on a failure. Exit code 0 when clean, 1 on any failure. --scheduler random|pct,
// --replay and --same-plan run under the controlled scheduler instead (stress_explore.h).
#include <fmt/format.h>

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/job_start.h"
#include "runtime/process_model.h"
#include "runtime/stress/stress.h"
#include "train/cli/commands.h"
#include "train/cli/flags.h"
#include "train/cli/output_file.h"
#include "train/cli/planted_bugs.h"
#include "train/cli/stress_explore.h"

namespace dtsim::cli {
namespace {

struct StressFlags {
  int ranks = 8, iterations = 20, calls = 16, threads_per_process = 1;
  int64_t seed = 1, start = 0, jitter_us = 50, max_numel = 2048, timeout_ms = 10000;
  bool unsafe_live_sends = false, keep_going = false;
  std::string report;
  // The controlled scheduler (stress_explore.h) and planted bugs (planted_bugs.h).
  std::string scheduler = "jitter", mutant = "none", schedule_file, replay;
  int depth = 3, schedules = 100;
  bool same_plan = false;
};

std::vector<std::string> mutant_choices() {
  std::vector<std::string> names = {"none"};
  for (const PlantedBug& b : planted_bugs()) names.push_back(b.name);
  return names;
}

std::string reproduce_command(const StressOptions& o, int iteration) {
  return fmt::format(
      "dtsim stress --ranks {} --seed {} --start {} --iterations 1 --jitter-us {} --calls {} "
      "--max-numel {}{}{}{}",
      o.ranks, o.seed, iteration, o.jitter_us, o.calls_per_iteration, o.max_numel,
      o.unsafe_live_sends ? " --unsafe-live-sends" : "", o.planted ? " --mutant " : "",
      o.planted ? o.planted->name : "");
}

std::string report_text(const StressOptions& o, const StressResult& r, double secs) {
  nlohmann::json j = {
      {"options",
       {{"ranks", o.ranks},
        {"iterations", o.iterations},
        {"seed", o.seed},
        {"start", o.first_iteration},
        {"jitter_us", o.jitter_us},
        {"calls", o.calls_per_iteration},
        {"max_numel", o.max_numel},
        {"timeout_ms", o.timeout.count()},
        {"unsafe_live_sends", o.unsafe_live_sends},
        {"keep_going", o.keep_going},
        {"mutant", o.planted ? o.planted->name : "none"}}},
      {"iterations", r.iterations},
      {"collectives", r.collectives},
      {"results_checked", r.results_checked},
      {"failures", r.failures},
      {"seconds", secs},
      {"messages", r.messages},
  };
  if (!r.ok()) {
    j["first_failed_iteration"] = r.first_failed_iteration;
    j["reproduce"] = reproduce_command(o, r.first_failed_iteration);
    j["flight_report"] = r.flight_report;
  }
  return json_with_generator(j.dump(2), "dtsim stress") + "\n";
}

// The memory available to a new process now: MemAvailable of /proc/meminfo (free memory and
// what the kernel can reclaim), else the free pages.
uint64_t available_memory() {
  if (std::FILE* f = std::fopen("/proc/meminfo", "r")) {
    char line[128];
    unsigned long long kb = 0;
    while (std::fgets(line, sizeof line, f)) {
      if (std::sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    }
    std::fclose(f);
    if (kb > 0) return kb * 1024;
  }
  return static_cast<uint64_t>(sysconf(_SC_AVPHYS_PAGES)) *
         static_cast<uint64_t>(sysconf(_SC_PAGE_SIZE));
}

// Stress's memory grows with --ranks, --calls and --max-numel: a run whose estimated peak
// (estimate_peak_bytes, over the first kScanIterations iterations) exceeds the memory
// available is refused before any work, naming the flags to lower.
uint64_t refuse_what_cannot_fit(const StressOptions& o) {
  constexpr int kScanIterations = 10000;
  uint64_t peak = 0;
  int at = o.first_iteration;
  for (int i = 0; i < std::min(o.iterations, kScanIterations); ++i) {
    const uint64_t b = estimate_peak_bytes(o, o.first_iteration + i);
    if (b > peak) {
      peak = b;
      at = o.first_iteration + i;
    }
  }
  // The estimate ran 3-12% under the measured peak resident size (docs/runtime.md): a quarter
  // more must be available.
  const uint64_t need = peak + peak / 4;
  const uint64_t available = available_memory();
  if (need <= available) return peak;
  fail("stress",
       fmt::format("iteration {} needs about {:.1f} GB (--ranks {}, --calls {}, "
                   "--max-numel {}), more than the {:.1f} GB available here; lower "
                   "--max-numel, --calls or --ranks",
                   at, need / 1e9, o.ranks, o.calls_per_iteration, o.max_numel, available / 1e9));
  return peak;
}

int run_stress(const CLI::App& app, const StressFlags& f) {
  StressOptions o;
  // Under mpirun the world is processes x --threads-per-process ranks; --ranks defaults to
  // that and must agree with it. Only process 0 prints the summary.
  o.process = ProcessModel::from_environment(0, f.threads_per_process);
  if (!o.process.mpi && given(app, "--threads-per-process")) {
    fail("stress", "--threads-per-process needs mpirun; without it use --ranks N");
  }
  o.ranks = f.ranks;
  if (o.process.mpi) {
    if (given(app, "--ranks") && f.ranks != o.process.world_size()) {
      fail("stress", fmt::format("--ranks {} but mpirun started {} = {} ranks; drop --ranks or "
                                 "make them match",
                                 f.ranks, o.process.describe(), o.process.world_size()));
    }
    o.ranks = o.process.world_size();
    if (o.ranks > World::kMaxRanks) {  // before any work, not from the first World
      fail("stress", fmt::format("{} = {} ranks is more than a world holds ({}); lower "
                                 "--threads-per-process or the number of processes",
                                 o.process.describe(), o.ranks, World::kMaxRanks));
    }
  }
  const bool lead = o.process.process == 0;
  o.iterations = f.iterations;
  o.seed = static_cast<uint64_t>(f.seed);
  o.first_iteration = static_cast<int>(f.start);
  o.jitter_us = static_cast<uint32_t>(f.jitter_us);
  o.calls_per_iteration = f.calls;
  o.max_numel = static_cast<size_t>(f.max_numel);
  o.timeout = std::chrono::milliseconds(f.timeout_ms);
  o.unsafe_live_sends = f.unsafe_live_sends;
  o.keep_going = f.keep_going;
  for (const PlantedBug& b : planted_bugs()) {
    if (f.mutant == b.name) o.planted = &b;  // OneOf checked the name
  }
  const bool controlled = f.scheduler != "jitter" || !f.replay.empty() || f.same_plan;
  if (o.process.mpi && controlled) {
    fail("stress",
         "--scheduler random|pct, --replay and --same-plan run thread worlds only; "
         "run them without mpirun");
  }
  // Flags that the chosen mode would ignore are errors, not no-ops; each hint leads to a
  // command that runs.
  const bool searching = controlled && f.replay.empty() && !f.same_plan;  // random|pct search
  const auto refuse = [&](const char* flag, const std::string& why) {
    if (app.get_option_no_throw(flag) && given(app, flag))
      fail("stress", std::string(flag) + " " + why);
  };
  if (!f.replay.empty()) {
    for (const char* flag : {"--ranks", "--seed", "--start", "--calls", "--max-numel", "--mutant",
                             "--iterations", "--schedules", "--scheduler", "--depth", "--jitter-us",
                             "--same-plan", "--schedule-file", "--unsafe-live-sends"}) {
      refuse(flag,
             "does not apply to --replay, which runs what its file names (ranks, seed, "
             "iteration, calls, max-numel, mutant, unsafe-live-sends, every choice); drop " +
                 std::string(flag));
    }
  }
  if (f.scheduler != "pct") {
    refuse("--depth", "applies to --scheduler pct (this run is --scheduler " + f.scheduler +
                          "); drop --depth or add --scheduler pct");
  }
  if (!controlled) {
    refuse("--schedules",
           "counts the schedules of --scheduler random|pct and --same-plan; the "
           "jitter scheduler runs --iterations: use that, or add --scheduler pct");
  }
  if (!searching) {
    refuse("--schedule-file",
           std::string("is where a --scheduler random|pct search writes a failing schedule; "
                       "this run writes none: drop it, or ") +
               (f.same_plan ? "drop --same-plan" : "add --scheduler pct"));
  }
  if (controlled) {
    refuse("--iterations", "counts jitter iterations; with --scheduler " + f.scheduler +
                               (f.same_plan ? " --same-plan" : "") + " give --schedules instead");
  }
  if (f.scheduler != "jitter") {
    refuse("--jitter-us",
           "applies to --scheduler jitter; the controlled scheduler injects no "
           "sleeps: drop --jitter-us");
  }
  OutputFile report, schedule_file;
  if (given(app, "--report")) report = OutputFile("stress", "report", f.report, lead);
  if (searching && given(app, "--schedule-file")) {
    schedule_file = OutputFile("stress", "schedule-file", f.schedule_file);
    if (schedule_file.name() == "standard output") {
      fail("stress", "--schedule-file " + f.schedule_file +
                         " is standard output; give a file, which --replay reads back");
    }
  }
  if (controlled && f.replay.empty()) o.iterations = f.schedules;
  const uint64_t peak = f.replay.empty() ? refuse_what_cannot_fit(o) : 0;
  begin_work();
  if (controlled) {
    ExploreFlags ef;
    ef.scheduler = f.scheduler;
    ef.depth = f.depth;
    ef.replay = f.replay;
    ef.schedule_file = schedule_file.open() ? &schedule_file : nullptr;
    ef.same_plan = f.same_plan;
    ef.report = report.open() ? &report : nullptr;
    return explore_stress(o, ef);
  }

  const std::string layout = o.process.mpi ? " (" + o.process.describe() + ")" : std::string();
  if (lead)
    std::printf(
        "dtsim stress: %d ranks%s, iterations %d..%d, seed %llu, jitter %u us%s; memory about "
        "%.0f MB at most (estimated)\n",
        o.ranks, layout.c_str(), o.first_iteration, o.first_iteration + o.iterations - 1,
        static_cast<unsigned long long>(o.seed), o.jitter_us,
        o.unsafe_live_sends ? ", UNSAFE live sends (snapshot rule broken on purpose)" : "",
        peak / 1e6);
  const auto t0 = std::chrono::steady_clock::now();
  const StressResult r = run_stress(o);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (lead)
    std::printf(
        "iterations: %d\ncollectives checked: %llu (%llu per-rank results)\nfailures: %llu\n"
        "time: %.2f s\n",
        r.iterations, static_cast<unsigned long long>(r.collectives),
        static_cast<unsigned long long>(r.results_checked),
        static_cast<unsigned long long>(r.failures), secs);
  for (const auto& m : r.messages) std::printf("FAIL %s\n", m.c_str());
  if (lead && !r.ok()) {
    std::printf("reproduce: %s\n", reproduce_command(o, r.first_failed_iteration).c_str());
  }
  if (report.open()) {
    report.commit(report_text(o, r, secs));
    std::printf("report: %s%s\n", report.name().c_str(),
                r.ok() ? "" : " (with every rank's flight recorder)");
  }
  return r.ok() ? 0 : 1;
}

}  // namespace

Command add_stress(CLI::App& dtsim) {
  CLI::App* app = dtsim.add_subcommand(
      "stress", "random collectives under jitter, checked against a reference");
  describe(
      app,
      "Runs K iterations of C random collectives each (all_reduce, reduce_scatter, all_gather,\n"
      "broadcast, reduce, all_to_all, all_to_all_single, barrier; random lengths including 0\n"
      "and uneven ones, algorithms, roots, reduce ops, dtypes, subgroups from new_group and\n"
      "split) on N rank threads, with random yields and sleeps of up to U us in the transport.\n"
      "Every result is checked against a single-threaded reference; the deterministic\n"
      "algorithms run twice and must match bitwise. With N >= 2 each iteration also has a\n"
      "failing lender: one rank lends, fails and overwrites its buffer; every receiver must\n"
      "read the lent bytes intact or be refused. Iteration I depends only on (S, I).");
  app->option_defaults()->always_capture_default();
  app->fallthrough();  // --config belongs to dtsim
  auto f = std::make_shared<StressFlags>();
  app->add_option("--ranks", f->ranks, "rank threads (falls back to $WORLD_SIZE)")
      ->transform(Integer(1, 256))
      ->envname("WORLD_SIZE");
  app->add_option("--threads-per-process", f->threads_per_process,
                  "under mpirun: rank threads per process; the world is processes x this")
      ->transform(Integer(1, 256));
  app->add_option("--iterations", f->iterations, "iterations to run")
      ->transform(Integer(1, 100000000));
  app->add_option("--seed", f->seed, "plan and jitter seed")->transform(Integer(0, INT64_MAX));
  app->add_option("--start", f->start, "first iteration, to reproduce a failure")
      ->transform(Integer(0, 1000000000));
  app->add_option("--jitter-us", f->jitter_us, "max injected sleep in microseconds, 0 = none")
      ->transform(Integer(0, 100000));
  app->add_option("--calls", f->calls, "collectives per iteration")->transform(Integer(1, 100000));
  app->add_option("--max-numel", f->max_numel, "typical max length; one call in ten is up to 8x")
      ->transform(Integer(1, 1 << 24));
  app->add_option("--timeout-ms", f->timeout_ms,
                  "deadline of a blocked wait, plus per iteration 50 us a message and 1 s per "
                  "50 MB that its largest call sends over all ranks")
      ->transform(Integer(1, 3600000));
  app->add_flag("--unsafe-live-sends", f->unsafe_live_sends,
                "break the snapshot rule on purpose: stress must catch it");
  app->add_flag("--keep-going", f->keep_going, "continue after a failing iteration");
  app->add_option("--report", f->report,
                  "write the outcome as JSON, with every rank's flight recorder on a failure; "
                  "- is standard output")
      ->type_name("FILE")
      ->default_str("");
  app->add_option("--scheduler", f->scheduler,
                  "jitter: free-running threads with injected jitter; random, pct: one rank "
                  "at a time under a controlled scheduler choosing every interleaving from the "
                  "seed (exact replay; thread worlds only)")
      ->transform(OneOf({"jitter", "random", "pct"}));
  app->add_option("--depth", f->depth, "PCT bug depth d: d - 1 priority change points")
      ->transform(Integer(1, 16));
  app->add_option("--schedules", f->schedules,
                  "under --scheduler random|pct: schedules to explore (an iteration each)")
      ->transform(Integer(1, 100000000));
  if (!planted_bugs().empty()) {  // the test binary dtsim_with_mutants only
    app->add_option("--mutant", f->mutant, "plant a bug that stress must find (runtime/mutants/)")
        ->transform(OneOf(mutant_choices()));
  }
  app->add_option("--schedule-file", f->schedule_file,
                  "where a failing schedule is written (default dtsim-schedule-S-I.txt)")
      ->type_name("FILE")
      ->default_str("");
  app->add_option("--replay", f->replay, "replay a schedule file exactly")
      ->type_name("FILE")
      ->default_str("");
  app->add_flag("--same-plan", f->same_plan,
                "run every schedule on plan --start and count the failing ones (a mutant's hit "
                "rate per schedule, for any --scheduler)");
  app->footer("example: dtsim stress --ranks 8 --iterations 50 --seed 7 --jitter-us 50");
  return {app, [app, f] { return run_stress(*app, *f); }};
}

}  // namespace dtsim::cli
