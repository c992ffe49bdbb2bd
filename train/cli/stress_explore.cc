// dtsim stress under the controlled scheduler (runtime/schedule/explore.h): explores
// schedules with random walk or PCT, and on a failure shrinks it, writes the schedule
// file and prints the one-line command that replays it; --replay runs such a file.
#include <chrono>
#include <cstdio>
#include <string>

#include "runtime/schedule/explore.h"
#include "train/cli/stress_explore.h"

namespace dtsim::cli {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int replay(StressOptions o, const ExploreFlags& f) {
  const schedule::ScheduleFile sf = schedule::read_schedule_file(f.replay);
  o.ranks = sf.options.ranks;
  o.seed = sf.options.seed;
  o.calls_per_iteration = sf.options.calls_per_iteration;
  o.max_numel = sf.options.max_numel;
  o.mutant = sf.options.mutant;
  std::printf("dtsim stress --replay %s: %d ranks, seed %llu, iteration %d, mutant %s, %zu steps\n",
              f.replay.c_str(), o.ranks, static_cast<unsigned long long>(o.seed), sf.iteration,
              mutant_name(o.mutant), sf.record.choices.size());
  auto strategy = schedule::make_replay(sf.record);
  std::string divergence;
  const StressResult r =
      schedule::run_schedule(o, sf.iteration, strategy.get(), nullptr, &divergence);
  for (const auto& m : r.messages) std::printf("FAIL %s\n", m.c_str());
  if (!divergence.empty()) {
    std::printf("NONDETERMINISTIC replay: %s\n", divergence.c_str());
    return 1;
  }
  std::printf("replay: %s\n", r.ok() ? "passed (no failure)" : "failed as recorded");
  return r.ok() ? 0 : 1;
}

}  // namespace

int explore_stress(StressOptions o, const ExploreFlags& f) {
  if (!f.replay.empty()) return replay(o, f);
  schedule::ExploreOptions e;
  e.strategy = f.scheduler;
  e.depth = f.depth;
  const std::string how = f.scheduler == "pct"      ? "pct depth " + std::to_string(f.depth)
                          : f.scheduler == "random" ? "random walk"
                                                    : "jitter";
  if (f.same_plan) {
    std::printf(
        "dtsim stress --same-plan: %d ranks, plan %d of seed %llu, %d schedules, %s, "
        "mutant %s\n",
        o.ranks, o.first_iteration, static_cast<unsigned long long>(o.seed), o.iterations,
        how.c_str(), mutant_name(o.mutant));
    const auto t0 = std::chrono::steady_clock::now();
    const schedule::SamePlanResult r = schedule::same_plan(o, e);
    std::printf("failing schedules: %d of %d (first: run %d)\ntime: %.2f s\n", r.failing, r.runs,
                r.first_failing, seconds_since(t0));
    if (r.failing) std::printf("FAIL %s\n", r.first_message.c_str());
    return r.failing ? 1 : 0;
  }
  std::printf("dtsim stress: %d ranks, schedules %d..%d, seed %llu, scheduler %s, mutant %s\n",
              o.ranks, o.first_iteration, o.first_iteration + o.iterations - 1,
              static_cast<unsigned long long>(o.seed), how.c_str(), mutant_name(o.mutant));
  const auto t0 = std::chrono::steady_clock::now();
  const schedule::ExploreResult r = schedule::explore(o, e);
  std::printf(
      "schedules: %d\ncollectives checked: %llu (%llu per-rank results)\nfailures: %llu\n"
      "time: %.2f s\n",
      r.stress.iterations, static_cast<unsigned long long>(r.stress.collectives),
      static_cast<unsigned long long>(r.stress.results_checked),
      static_cast<unsigned long long>(r.stress.failures), seconds_since(t0));
  if (!r.failed) return 0;
  std::printf("FAIL %s\n", r.message.c_str());
  if (f.report) std::printf("flight recorder:\n%s", r.stress.flight_report.c_str());
  std::printf(
      "found at schedule %d (%d schedules run); %d preemptions, shrunk to %d in %zu steps\n",
      r.failed_iteration, r.stress.iterations, r.preemptions_found, r.record.preemptions(),
      r.record.choices.size());
  std::printf("replayed twice: %s\n", r.replay_same ? "same failure both times"
                                                    : ("DIFFERENT (" + r.divergence + ")").c_str());
  const std::string path = f.schedule_file.empty()
                               ? "dtsim-schedule-" + std::to_string(o.seed) + "-" +
                                     std::to_string(r.failed_iteration) + ".txt"
                               : f.schedule_file;
  schedule::ScheduleFile sf;
  sf.options = o;
  sf.iteration = r.failed_iteration;
  sf.record = r.record;
  schedule::write_schedule_file(path, sf);
  std::printf("replay: dtsim stress --replay %s\n", path.c_str());
  return 1;
}

}  // namespace dtsim::cli
