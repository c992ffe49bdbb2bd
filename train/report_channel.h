// ReportChannel: how a rank's measurements reach global rank 0 (through collectives, never
// through shared memory) without showing in what they measure. It runs on a communicator of
// its own over the whole world, and keeps the traffic of its own calls apart, so that the
// counters and flight record a rank reports describe training alone: the tests compare them
// with the formulas. Its cost, per step one all_gather of one double per loss slot and rank,
// and at the end one point-to-point message pair per rank to rank 0, is reported separately
// (RankReport::reporting).
//
// Thread safety: one per rank thread, like its communicator.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "runtime/communicator.h"
#include "train/rank_outcome.h"

namespace dtsim::train {

class ReportChannel {
 public:
  // Collective over `world` (every rank calls it): makes the channel's communicator.
  explicit ReportChannel(Communicator& world);
  ReportChannel(const ReportChannel&) = delete;
  ReportChannel& operator=(const ReportChannel&) = delete;

  int rank() const { return comm_->rank(); }
  int size() const { return comm_->size(); }

  // Collective: out (size() * in.size()) = every rank's `in`, in rank order.
  void all_gather(std::span<const double> in, std::span<double> out);

  // Collective: returns once every rank has entered it (checkpoints' commit, checkpoint/).
  void barrier();

  // This rank's traffic counters and flight record with the channel's own calls taken out.
  RankCounters training_counters() const;
  std::vector<FlightEntry> training_flight_record() const;
  // The channel's own traffic so far.
  const RankCounters& reporting_counters() const { return overhead_; }

  // Collective: every rank's outcome, in rank order, on rank 0; empty elsewhere.
  std::vector<RankOutcome> gather_to_root(const RankOutcome& mine);

 private:
  // Runs fn() and books the traffic it causes on this rank as the channel's.
  template <class F>
  void booked(F&& fn);

  Communicator& world_;
  RankCounters overhead_;
  std::unique_ptr<Communicator> comm_;
};

}  // namespace dtsim::train
