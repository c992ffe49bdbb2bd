// TracedComm: a rank's communicator together with its timeline, so that every collective a
// model-parallel layer issues (TP's all_reduce, EP's all_to_all) is recorded with its bytes
// when --trace is on, without the layer knowing about tracing. Counting is left to the
// runtime's counters. Used by tensor_parallel/ and expert_parallel/.
//
// Thread safety: none; one TracedComm belongs to one rank thread.
#pragma once

#include <cstddef>
#include <span>

#include "runtime/algorithms/registry.h"
#include "runtime/communicator.h"
#include "train/accounting.h"

namespace dtsim::train {

class TracedComm {
 public:
  // `timeline` must outlive this object; all_reduce uses `algo`.
  TracedComm(Communicator& comm, RankTimeline& timeline, Algo algo = Algo::kAuto)
      : comm_(comm), timeline_(timeline), algo_(algo) {}

  RankTimeline& timeline() { return timeline_; }
  int rank() const { return comm_.rank(); }
  int size() const { return comm_.size(); }

  // Sum-all-reduce over the group, recorded as "all_reduce".
  template <class T>
  void all_reduce(std::span<T> data) {
    timeline_.collective("all_reduce", comm_,
                         [&] { comm_.all_reduce(data, ReduceOp::kSum, algo_); });
  }
  // All-gather of equal chunks (rank r's in at out[r n, (r + 1) n)), recorded as
  // "all_gather"; reduce-scatter (chunk r of in summed into rank r's out), recorded as
  // "reduce_scatter". Both use `algo` where the registry has it for them, else their auto.
  template <class T>
  void all_gather(std::span<const T> in, std::span<T> out) {
    timeline_.collective("all_gather", comm_, [&] {
      comm_.all_gather(in, out, algorithm_or_auto(OpKind::kAllGather, algo_));
    });
  }
  template <class T>
  void reduce_scatter(std::span<const T> in, std::span<T> out) {
    timeline_.collective("reduce_scatter", comm_, [&] {
      comm_.reduce_scatter(in, out, ReduceOp::kSum,
                           algorithm_or_auto(OpKind::kReduceScatter, algo_));
    });
  }
  // Equal-chunk all_to_all, recorded as "all_to_all".
  template <class T>
  void all_to_all(std::span<const T> in, std::span<T> out) {
    timeline_.collective("all_to_all", comm_, [&] { comm_.all_to_all(in, out); });
  }
  // Split-size all_to_all (torch's all_to_all_single), recorded as "all_to_all".
  template <class T>
  void all_to_all_single(std::span<const T> in, std::span<const size_t> send_counts,
                         std::span<T> out, std::span<const size_t> recv_counts) {
    timeline_.collective("all_to_all", comm_,
                         [&] { comm_.all_to_all_single(in, send_counts, out, recv_counts); });
  }

 private:
  Communicator& comm_;
  RankTimeline& timeline_;
  Algo algo_;
};

}  // namespace dtsim::train
