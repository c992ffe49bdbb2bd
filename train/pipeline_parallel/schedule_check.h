// Checks a pipeline schedule before it runs, and measures it.
//
// check_structure: the messages match and the program is well formed. On every channel
// (sender, receiver, activation or gradient) the k-th send and the k-th receive name the same
// (micro-batch, chunk), which is what lets the executor match them by (peer, tag) in order.
// Every (micro-batch, chunk) has one forward and one backward (or one B and one W), on rank
// chunk % p, forward first (B before W); a forward of chunk c > 0 is preceded on its rank by
// the receive of chunk c - 1's activations, a backward of chunk c < last by the receive of
// chunk c + 1's gradient; sends follow the compute that produces them.
//
// dry_run: runs the schedule on unit-time compute slots (each F, B, Bi, Bw takes one; a send
// is eager and free; a receive waits until the matching send's slot has ended). It returns
// every rank's timeline, the bubble (idle slots over p x total slots) and the peak number of
// micro-batches in flight per rank (forward done, backward - B for ZB-H1 - not yet). A
// deadlock is an error naming every waiting rank and what it waits for.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "train/pipeline_parallel/schedule.h"

namespace dtsim::train::pipeline {

// A non-negative fraction in lowest terms (den > 0).
struct Fraction {
  int64_t num = 0;
  int64_t den = 1;
  static Fraction of(int64_t num, int64_t den);  // reduced
  double value() const { return static_cast<double>(num) / static_cast<double>(den); }
  bool operator==(const Fraction&) const = default;
};
std::string to_string(const Fraction& f);  // "3/11"

// "" when the schedule is well formed and every send matches its receive in order, else
// the first problem, one line naming the ranks, the channel and the (micro-batch, chunk).
std::string check_structure(const Schedule& s);

struct DryRun {
  std::string error;  // "" or why it failed (check_structure's error, or the deadlock)
  int total_slots = 0;
  // timeline[r][t]: index into s.ranks[r] of the compute action in slot t, -1 when idle.
  std::vector<std::vector<int>> timeline;
  int64_t busy_slots = 0, idle_slots = 0;  // over all ranks, within total_slots
  Fraction bubble;                         // idle / (p total_slots)
  std::vector<int> peak_in_flight;         // per rank, in (micro-batch, chunk) units
};

// check_structure, then the unit-slot simulation.
DryRun dry_run(const Schedule& s);

// Peak micro-batches in flight per local chunk j of rank r (global chunk r + j p), from the
// program order alone (a chunk's count does not depend on timing).
std::vector<int> peak_in_flight_per_chunk(const Schedule& s, int rank);

// Peak passes held per local chunk j of rank r: micro-batches whose forward ran and whose
// last backward pass (B, or W for ZB-H1) has not, which the executor keeps a pass for.
// Equal to peak_in_flight_per_chunk except for ZB-H1.
std::vector<int> peak_held_per_chunk(const Schedule& s, int rank);

// The paper's bubble for `spec` in slots: (p - 1)/(m + p - 1), (p - 1)/(v m + p - 1)
// interleaved, (p - 1)/(3 m + p - 1) ZB-H1.
Fraction bubble_formula(const ScheduleSpec& spec);

// The schedule's bound on the micro-batches rank r keeps (peak_held_per_chunk, chunk units):
// in_flight_bound, but for ZB-H1 min(2p - 1 - r, m), activations kept until W.
int held_bound(const ScheduleSpec& spec, int rank);

// The schedule's bound on peak in-flight micro-batches (chunk units) of rank r: m for
// GPipe, min(p - r, m) for 1F1B and ZB-H1, min((p - r - 1) 2 + (v - 1) p + 1, v m) for
// interleaved (v m when m = p: every forward is warm-up).
int in_flight_bound(const ScheduleSpec& spec, int rank);

}  // namespace dtsim::train::pipeline
