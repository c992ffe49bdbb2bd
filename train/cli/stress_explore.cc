// dtsim stress under the controlled scheduler (runtime/schedule/explore.h): explores
// schedules with random walk or PCT, and on a failure shrinks it, writes the schedule
// file and prints the one-line command that replays it; --replay runs such a file.
// --report FILE gets the outcome as JSON.
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "runtime/schedule/explore.h"
#include "train/cli/output_file.h"
#include "train/cli/planted_bugs.h"
#include "train/cli/stress_explore.h"

namespace dtsim::cli {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

nlohmann::json options_json(const StressOptions& o, const ExploreFlags& f) {
  return {{"ranks", o.ranks},
          {"schedules", o.iterations},
          {"seed", o.seed},
          {"start", o.first_iteration},
          {"calls", o.calls_per_iteration},
          {"max_numel", o.max_numel},
          {"timeout_ms", o.timeout.count()},
          {"scheduler", f.scheduler},
          {"depth", f.depth},
          {"mutant", (o.planted ? o.planted->name : "none")},
          {"unsafe_live_sends", o.unsafe_live_sends},
          {"keep_going", o.keep_going},
          {"same_plan", f.same_plan},
          {"replay", f.replay}};
}

// Writes `j` to --report, if given, and says where it went.
void commit_report(const ExploreFlags& f, const nlohmann::json& j, bool failed) {
  if (!f.report) return;
  f.report->commit(json_with_generator(j.dump(2), "dtsim stress") + "\n");
  std::printf("report: %s%s\n", f.report->name().c_str(),
              failed ? " (with every rank's flight recorder)" : "");
}

int replay(StressOptions o, const ExploreFlags& f) {
  const schedule::ScheduleFile sf = schedule::read_schedule_file(f.replay, planted_bugs());
  o.ranks = sf.options.ranks;
  o.seed = sf.options.seed;
  o.calls_per_iteration = sf.options.calls_per_iteration;
  o.max_numel = sf.options.max_numel;
  o.planted = sf.options.planted;
  o.unsafe_live_sends = sf.options.unsafe_live_sends;
  std::printf(
      "dtsim stress --replay %s: %d ranks, seed %llu, iteration %d, mutant %s%s, %zu steps\n",
      f.replay.c_str(), o.ranks, static_cast<unsigned long long>(o.seed), sf.iteration,
      (o.planted ? o.planted->name : "none"), o.unsafe_live_sends ? ", UNSAFE live sends" : "",
      sf.record.choices.size());
  auto strategy = schedule::make_replay(sf.record);
  std::string divergence, summary;
  const StressResult r =
      schedule::run_schedule(o, sf.iteration, strategy.get(), nullptr, &divergence, &summary);
  for (const auto& m : r.messages) std::printf("FAIL %s\n", m.c_str());
  if (!r.ok()) std::printf("schedule: %s\n", summary.c_str());
  nlohmann::json j = {{"options", options_json(o, f)},
                      {"iteration", sf.iteration},
                      {"steps", sf.record.choices.size()},
                      {"failures", r.failures},
                      {"messages", r.messages},
                      {"divergence", divergence}};
  if (!r.ok()) j["flight_report"] = r.flight_report;
  if (!divergence.empty()) {
    std::printf("NONDETERMINISTIC replay: %s\n", divergence.c_str());
    commit_report(f, j, !r.ok());
    return 1;
  }
  std::printf("replay: %s\n", r.ok() ? "passed (no failure)" : "failed as recorded");
  commit_report(f, j, !r.ok());
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
        how.c_str(), (o.planted ? o.planted->name : "none"));
    const auto t0 = std::chrono::steady_clock::now();
    const schedule::SamePlanResult r = schedule::same_plan(o, e);
    const double secs = seconds_since(t0);
    const std::string first =
        r.failing ? " (first: run " + std::to_string(r.first_failing) + ")" : "";
    std::printf("failing schedules: %d of %d%s\ntime: %.2f s\n", r.failing, r.runs, first.c_str(),
                secs);
    if (r.failing) std::printf("FAIL %s\n", r.first_message.c_str());
    commit_report(f,
                  {{"options", options_json(o, f)},
                   {"runs", r.runs},
                   {"failing", r.failing},
                   {"first_failing", r.first_failing},
                   {"first_message", r.first_message},
                   {"seconds", secs}},
                  false);
    return r.failing ? 1 : 0;
  }
  std::printf("dtsim stress: %d ranks, schedules %d..%d, seed %llu, scheduler %s, mutant %s\n",
              o.ranks, o.first_iteration, o.first_iteration + o.iterations - 1,
              static_cast<unsigned long long>(o.seed), how.c_str(),
              (o.planted ? o.planted->name : "none"));
  const auto t0 = std::chrono::steady_clock::now();
  const schedule::ExploreResult r = schedule::explore(o, e);
  const double secs = seconds_since(t0);
  std::printf(
      "schedules: %d\ncollectives checked: %llu (%llu per-rank results)\nfailures: %llu\n"
      "failing lenders: %llu receives refused the withdrawn lend\ntime: %.2f s\n",
      r.stress.iterations, static_cast<unsigned long long>(r.stress.collectives),
      static_cast<unsigned long long>(r.stress.results_checked),
      static_cast<unsigned long long>(r.stress.failures),
      static_cast<unsigned long long>(r.stress.lends_refused), secs);
  nlohmann::json j = {{"options", options_json(o, f)},
                      {"schedules", r.stress.iterations},
                      {"collectives", r.stress.collectives},
                      {"results_checked", r.stress.results_checked},
                      {"failures", r.stress.failures},
                      {"lends_refused", r.stress.lends_refused},
                      {"seconds", secs}};
  if (!r.failed) {
    commit_report(f, j, false);
    return 0;
  }
  std::printf("FAIL %s\n", r.message.c_str());
  std::printf("schedule: %s\n", r.schedule.c_str());
  std::printf(
      "found at schedule %d (%d schedules run); %d preemptions, shrunk to %d in %zu steps\n",
      r.failed_iteration, r.stress.iterations, r.preemptions_found, r.record.preemptions(),
      r.record.choices.size());
  std::printf("replayed twice: %s\n", r.replay_same ? "same failure both times"
                                                    : ("DIFFERENT (" + r.divergence + ")").c_str());
  OutputFile default_file;
  OutputFile* out = f.schedule_file;
  if (out == nullptr) {  // dtsim-schedule-S-I.txt, or -2, -3, ... if a file not ours has it
    const std::string base =
        "dtsim-schedule-" + std::to_string(o.seed) + "-" + std::to_string(r.failed_iteration);
    std::string name = base + ".txt";
    for (int k = 2; k < 100 && !may_write(name); ++k)
      name = base + "-" + std::to_string(k) + ".txt";
    default_file = OutputFile("stress", "schedule-file", name);
    out = &default_file;
  }
  schedule::ScheduleFile sf;
  sf.options = o;
  sf.iteration = r.failed_iteration;
  sf.record = r.record;
  out->commit(schedule::schedule_file_text(sf));
  const std::string path = out->name();
  std::printf("replay: dtsim stress --replay %s\n", path.c_str());
  j["message"] = r.message;
  j["schedule"] = r.schedule;
  j["failed_schedule"] = r.failed_iteration;
  j["preemptions_found"] = r.preemptions_found;
  j["preemptions_shrunk"] = r.record.preemptions();
  j["steps"] = r.record.choices.size();
  j["replay_same"] = r.replay_same;
  j["schedule_file"] = path;
  j["reproduce"] = "dtsim stress --replay " + path;
  j["flight_report"] = r.stress.flight_report;
  commit_report(f, j, true);
  return 1;
}

}  // namespace dtsim::cli
