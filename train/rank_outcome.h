// RankOutcome: everything one rank hands back from a training run (its report, step times,
// the losses it knows, its part of the final parameters), and the byte encoding in which it
// travels to global rank 0 through a collective. Ranks share nothing else: this is also what
// lets the same strategies run with ranks in different processes.
//
// Thread safety: plain values; encode/decode are pure functions.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "train/result.h"

namespace dtsim::train {

struct RankOutcome {
  RankReport report;                 // memory peaks, counters, flight record, timeline
  std::vector<double> step_seconds;  // wall time of each step on this rank
  std::vector<double> losses;        // global mean loss per step, as this rank knows it
  std::vector<float> params;         // this rank's part of the final parameters (may be empty)
  // TrainConfig::record_history: this rank's part of the parameters after each step.
  std::vector<std::vector<float>> history;
  // TrainConfig::lockstep: RankStrategy::step_sizes after each step.
  std::vector<std::vector<float>> step_sizes;
};

// A self-contained byte string (host byte order: every rank of a job runs the same binary
// on the same kind of machine); decode(encode(o)) == o.
std::vector<std::byte> encode(const RankOutcome& outcome);
// Throws Error when `bytes` is not an encode() result.
RankOutcome decode(std::span<const std::byte> bytes);

}  // namespace dtsim::train
