// How the controlled scheduler (scheduler.h) picks the next rank to run: one Strategy per
// exploration, asked at every scheduling point. Implementations: RandomWalk
// (random_walk.cc), Pct (pct.cc), Replay and Shrink (replay.cc).
//
// Thread safety: called only by the Scheduler, under its lock (one call at a time).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dtsim::schedule {

class Strategy {
 public:
  virtual ~Strategy() = default;
  // Before each run of `ranks` rank threads; `run_seed` makes the run's choices.
  virtual void begin(int ranks, uint64_t run_seed) = 0;
  // Picks one of `runnable` (ascending, not empty) at scheduling point `step` (0, 1, ...).
  // `current` is the rank that reached the point and may go on, or -1 (it blocked or
  // returned): choosing another rank while `current` >= 0 is a preemption.
  virtual int choose(const std::vector<int>& runnable, int current, uint64_t step) = 0;
  // "pct depth 2", "random walk", "replay", "shrink": for failure reports.
  virtual std::string name() const = 0;
  // Set when the strategy cannot follow its script (Replay: the runnable sets differ).
  virtual std::string divergence() const { return {}; }
};

// Uniformly random among the runnable ranks at every point.
std::unique_ptr<Strategy> make_random_walk();
// PCT (Burckhardt et al., ASPLOS 2010) with bug depth `depth` >= 1: random distinct rank
// priorities, and depth - 1 change points drawn from [0, k) where k is the longest run so
// far (a guess of 1000 before the first); at a change point the running rank drops below
// every initial priority. Finds a bug of depth d with probability >= 1/(n k^(d-1)).
std::unique_ptr<Strategy> make_pct(int depth);

// One run's choices, as the scheduler recorded them.
struct Record {
  std::vector<int> choices;             // chosen rank at each step
  std::vector<uint64_t> runnable_hash;  // hash of the runnable set at each step
  std::vector<uint8_t> preempted;       // 1 where the choice preempted a runnable rank
  int preemptions() const;
};

// Follows `record` exactly; a step whose runnable set hashes differently (or a run longer
// than the record) sets divergence(): something outside the scheduler is not deterministic.
std::unique_ptr<Strategy> make_replay(Record record);
// For shrinking: preempts the running rank only at the steps where `record` did and that
// are not in `skip`; when the running rank blocked or returned, takes the record's choice
// if it is runnable, else the lowest runnable rank. Never adds a preemption.
std::unique_ptr<Strategy> make_shrink(Record record, std::vector<uint64_t> skip);

// FNV-1a of the runnable set (for Record::runnable_hash).
uint64_t hash_runnable(const std::vector<int>& runnable);

}  // namespace dtsim::schedule
