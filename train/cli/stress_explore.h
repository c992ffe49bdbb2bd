// dtsim stress --scheduler random|pct and --replay (stress_explore.cc).
#pragma once

#include <string>

#include "runtime/stress/stress.h"
#include "train/cli/output_file.h"

namespace dtsim::cli {

struct ExploreFlags {
  std::string scheduler = "pct";  // "random" or "pct" ("jitter" only with same_plan)
  int depth = 3;
  std::string replay;            // a schedule file to replay, or ""
  OutputFile* report = nullptr;  // --report FILE (declared already), or nullptr
  // --schedule-file FILE (declared already), where a failing schedule goes; nullptr:
  // dtsim-schedule-SEED-ITERATION.txt, declared once the failure is found.
  OutputFile* schedule_file = nullptr;
  bool same_plan = false;  // every schedule runs plan --start: count the failing ones
};

// Runs the stress plans of `o` under the controlled scheduler (or replays f.replay);
// prints the outcome, commits f.report as JSON (with the flight recorder and the schedule
// so far on a failure) and returns the exit code (0 clean, 1 failure).
int explore_stress(StressOptions o, const ExploreFlags& f);

}  // namespace dtsim::cli
