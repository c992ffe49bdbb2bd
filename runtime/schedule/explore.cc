#include "runtime/schedule/explore.h"

#include <algorithm>

#include "common/splitmix.h"
#include "runtime/schedule/scheduler.h"

namespace dtsim::schedule {
namespace {

// Lets `sched` run the iteration: no jitter (the scheduler decides every interleaving),
// choices seeded from (seed, iteration).
void control(const StressOptions& o, Scheduler* sched, int iteration, WorldOptions& wo) {
  wo.jitter_us = 0;
  wo.scheduler = sched;
  sched->set_run_seed(mix64(o.seed, static_cast<uint64_t>(iteration)));
}

std::string first_message(const StressResult& r) {
  return r.messages.empty() ? "failed" : r.messages.front();
}

// `m` without its "controlled schedule (...)" parts, which name the strategy that ran it
// (a replay is not the PCT run it replays): what a replay must reproduce.
std::string failure_of(std::string m) {
  const std::string mark = "controlled schedule (";
  for (size_t at; (at = m.find(mark)) != std::string::npos;) {
    size_t end = at + mark.size();
    for (int depth = 1; end < m.size() && depth > 0; ++end)
      depth += m[end] == '(' ? 1 : m[end] == ')' ? -1 : 0;
    m.erase(at, end - at);
  }
  return m;
}

}  // namespace

StressResult run_schedule(const StressOptions& o, int iteration, Strategy* strategy, Record* record,
                          std::string* divergence, std::string* summary) {
  Scheduler sched(strategy);
  StressOptions so = o;
  so.first_iteration = iteration;
  so.iterations = 1;
  so.keep_going = false;
  so.configure = [&](int it, WorldOptions& wo) { control(o, &sched, it, wo); };
  StressResult r = run_stress(so);
  if (record) *record = sched.record();
  if (divergence) *divergence = sched.divergence();
  if (summary) *summary = sched.summary(0);
  return r;
}

SamePlanResult same_plan(const StressOptions& o, const ExploreOptions& e) {
  SamePlanResult res;
  std::unique_ptr<Strategy> strategy;
  if (e.strategy != "jitter") {
    strategy = e.strategy == "random" ? make_random_walk() : make_pct(std::max(1, e.depth));
  }
  Scheduler sched(strategy.get());
  for (int run = 0; run < o.iterations; ++run) {
    StressOptions so = o;
    so.iterations = 1;
    so.keep_going = false;
    const uint64_t salt = mix64(mix64(o.seed, static_cast<uint64_t>(o.first_iteration)), run);
    so.configure = [&](int it, WorldOptions& wo) {
      if (!strategy) {
        wo.jitter_seed = salt;
        return;
      }
      control(o, &sched, it, wo);
      sched.set_run_seed(salt);
    };
    const StressResult r = run_stress(so);
    ++res.runs;
    if (r.ok()) continue;
    if (res.failing++ == 0) {
      res.first_failing = run;
      res.first_message = first_message(r);
    }
  }
  return res;
}

ExploreResult explore(const StressOptions& o, const ExploreOptions& e) {
  ExploreResult res;
  std::unique_ptr<Strategy> strategy =
      e.strategy == "random" ? make_random_walk() : make_pct(std::max(1, e.depth));
  Scheduler sched(strategy.get());
  StressOptions so = o;  // keep_going: every schedule runs; the first failing one is kept
  so.configure = [&](int it, WorldOptions& wo) { control(o, &sched, it, wo); };
  bool kept = false;
  res.stress = run_stress(so, [&](int, const StressResult& r) {
    if (kept || r.ok()) return;
    kept = true;  // the scheduler's record is of the schedule that just ran
    res.record = sched.record();
    res.schedule = sched.summary(0);
  });
  if (res.stress.ok()) return res;
  res.failed = true;
  res.failed_iteration = res.stress.first_failed_iteration;
  res.preemptions_found = res.record.preemptions();
  res.message = first_message(res.stress);

  // Shrink, as delta debugging does: take preemptions out in groups (all, halves,
  // quarters, ..., one at a time) while the run still fails; each accepted run's own
  // record replaces the schedule, and the search starts over from it.
  int runs = 0;
  for (bool progress = true; progress && runs < e.shrink_runs;) {
    progress = false;
    std::vector<uint64_t> steps;
    for (size_t i = 0; i < res.record.preempted.size(); ++i) {
      if (res.record.preempted[i]) steps.push_back(i);
    }
    for (size_t group = steps.size(); group >= 1 && !progress && runs < e.shrink_runs; group /= 2) {
      for (size_t from = 0; from < steps.size() && runs < e.shrink_runs; from += group) {
        const std::vector<uint64_t> skip(
            steps.begin() + static_cast<std::ptrdiff_t>(from),
            steps.begin() + static_cast<std::ptrdiff_t>(std::min(steps.size(), from + group)));
        ++runs;
        auto shrink = make_shrink(res.record, skip);
        Record r;
        const StressResult sr = run_schedule(o, res.failed_iteration, shrink.get(), &r, nullptr);
        if (!sr.ok() && r.preemptions() < res.record.preemptions()) {
          res.record = std::move(r);
          res.message = first_message(sr);
          progress = true;
          break;
        }
      }
    }
  }

  // The replay must fail the same way, twice, with the same runnable sets.
  res.replay_same = true;
  for (int i = 0; i < 2; ++i) {
    auto replay = make_replay(res.record);
    std::string divergence;
    const StressResult rr =
        run_schedule(o, res.failed_iteration, replay.get(), nullptr, &divergence);
    if (!divergence.empty() && res.divergence.empty()) res.divergence = divergence;
    res.replay_same &=
        !rr.ok() && failure_of(first_message(rr)) == failure_of(res.message) && divergence.empty();
  }
  return res;
}

}  // namespace dtsim::schedule
