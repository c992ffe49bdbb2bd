// What a training run reports: losses, final parameters, and per-rank memory and traffic,
// measured (from the model's memory ledger and the runtime's counters) so that they can be
// set beside the analytical formulas.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "model/memory.h"
#include "runtime/diagnostics/counters.h"
#include "runtime/diagnostics/flight_recorder.h"
#include "runtime/diagnostics/trace.h"

namespace dtsim::train {

// One timed phase of one rank (forward, backward, optimizer, or a collective) for --trace.
struct PhaseEvent {
  std::string name;  // "forward", "backward", "optimizer", "all_reduce", ...
  std::chrono::steady_clock::time_point start, end;
  uint64_t bytes = 0;  // bytes sent, for collectives
};

struct RankReport {
  int rank = 0;
  // Static and activation bytes by model::MemoryCategory, as this rank holds them.
  std::array<int64_t, model::kNumMemoryCategories> memory{};
  // Traffic of the whole run's training, by collective kind (runtime counters).
  RankCounters counters;
  // Traffic of reporting: the per-step loss all_gather and, on ranks other than 0, sending
  // their outcome to rank 0 (train/report_channel.h); not part of `counters`.
  RankCounters reporting;
  // The rank's last collectives (runtime flight recorder), oldest first.
  std::vector<FlightEntry> flight;
  std::vector<PhaseEvent> timeline;  // filled when TrainConfig::trace
};

struct RunResult {
  std::vector<double> losses;  // global mean loss per step (what single-rank would report)
  std::vector<float> params;   // final full parameter vector (fp32; bf16 widened), gathered
  // TrainConfig::record_history: the full parameter vector after each step (the last is
  // `params`), for the lockstep check (check.h).
  std::vector<std::vector<float>> param_history;
  // The single-rank references under TrainConfig::lockstep: after each step, how far each
  // parameter moved per unit of its gradient (SliceOptimizer::step_sizes); the check scales
  // its floor by it (check.h).
  std::vector<std::vector<float>> step_sizes;
  std::vector<RankReport> ranks;
  int steps = 0;
  double seconds_per_step = 0;  // wall clock, median over steps after the first
  // Bytes one rank sends per step on average (max over ranks).
  double bytes_sent_per_step() const;
  // The first step whose loss is NaN or infinite (the run diverged), or -1.
  int first_nonfinite_step() const;
};

// How far a run is from a reference run.
struct Comparison {
  bool bitwise_equal = false;  // params and losses identical to the last bit
  double max_abs_diff = 0;     // largest |a - b| over all parameters
  double max_rel_diff = 0;     // largest |a - b| / max(|b|, 1e-6) over all parameters
  double max_loss_diff = 0;    // largest |loss_a - loss_b| over steps
  bool passed = false;         // every parameter and loss within atol + rtol * |reference|
};

// Compares parameters and losses like numpy.allclose(run, reference, rtol, atol).
Comparison compare(const RunResult& run, const RunResult& reference, double rtol, double atol);

}  // namespace dtsim::train
