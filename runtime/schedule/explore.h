// Systematic schedule exploration of the stress plans: each iteration of run_stress runs
// under the controlled scheduler (scheduler.h) with a strategy seeded from (seed,
// iteration), so that iteration I's interleaving is a pure function of (seed, I, strategy).
// A failing schedule is shrunk (fewer preemptions), replayed twice to confirm it fails the
// same way, and can be written to a schedule file that `dtsim stress --replay` runs again.
//
// Thread safety: one explore() at a time per ExploreOptions.
#pragma once

#include <span>
#include <string>

#include "runtime/schedule/strategy.h"
#include "runtime/stress/stress.h"

namespace dtsim::schedule {

struct ExploreOptions {
  std::string strategy = "pct";  // "random" or "pct" (same_plan also takes "jitter")
  int depth = 3;                 // PCT bug depth, >= 1
  int shrink_runs = 100;         // most re-runs spent shrinking a failing schedule
};

struct ExploreResult {
  StressResult stress;  // as run_stress reports it (iterations = schedules run)
  bool failed = false;
  int failed_iteration = -1;
  Record record;              // the failing schedule, shrunk
  int preemptions_found = 0;  // preemptions before shrinking
  std::string message;        // the shrunk schedule's first failure
  std::string schedule;       // the failing run's Scheduler::summary(0): strategy, seed, step
  bool replay_same = false;   // two replays of `record` failed with `message`, no divergence
  std::string divergence;     // a replay's divergence, if any
};

// Runs o.iterations schedules (one stress iteration each) under the strategy: until the first
// failing one, or all of them under o.keep_going. The first failing schedule is shrunk.
ExploreResult explore(const StressOptions& o, const ExploreOptions& e);

// Power on one plan: runs plan iteration o.first_iteration o.iterations times, each with
// its own schedule (the strategy, or "jitter": free threads with jitter seeds salted by
// the run), and counts the runs that fail.
struct SamePlanResult {
  int runs = 0;
  int failing = 0;
  int first_failing = -1;  // 0-based run index
  std::string first_message;
};
SamePlanResult same_plan(const StressOptions& o, const ExploreOptions& e);

// Runs iteration `iteration` of `o` once under `strategy` (replay, shrink, ...). Returns the
// stress result; *record gets the run's choices, *divergence the strategy's, *summary
// the Scheduler::summary(0) of the run (each may be nullptr).
StressResult run_schedule(const StressOptions& o, int iteration, Strategy* strategy, Record* record,
                          std::string* divergence, std::string* summary = nullptr);

// Schedule files: the stress options that make the plan, and the recorded choices.
struct ScheduleFile {
  StressOptions options;  // ranks, seed, calls, max_numel, planted bug, timeout
  int iteration = 0;
  Record record;
};
// A schedule file's first line.
inline constexpr const char* kScheduleMagic = "dtsim-schedule 1";
// The text of a schedule file holding `f` (it starts "dtsim-schedule 1"); the caller
// writes it (the CLI: through its OutputFile, which also knows the file for dtsim's).
std::string schedule_file_text(const ScheduleFile& f);
// Throws UsageError naming the problem if `path` is missing or malformed, or names a
// planted bug ("mutant NAME") other than "none" and those `known` to the caller.
ScheduleFile read_schedule_file(const std::string& path, std::span<const PlantedBug> known = {});

}  // namespace dtsim::schedule
