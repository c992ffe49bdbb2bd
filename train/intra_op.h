// Rank threads and oneTBB's intra-op threads share the machine's cores: while N rank
// threads run kernels, each of them is a oneTBB master, so oneTBB may add at most
// cores - N workers (none once the ranks alone fill the cores). A strategy holds an
// IntraOpLimit for as long as its World runs. The kernels' results do not depend on the
// thread count (model/parallel.h), so the limit changes speed, never bits.
#pragma once

#include <oneapi/tbb/global_control.h>

#include <algorithm>
#include <cstddef>
#include <thread>

namespace dtsim::train {

// oneTBB's max_allowed_parallelism (workers + 1) for `rank_threads` busy rank threads on
// `cores` cores: cores - rank_threads + 1, and at least 1 (kernels run on the rank thread).
inline size_t intra_op_parallelism(int rank_threads, int cores) {
  return static_cast<size_t>(std::max(1, cores - rank_threads + 1));
}

class IntraOpLimit {
 public:
  explicit IntraOpLimit(int rank_threads)
      : control_(tbb::global_control::max_allowed_parallelism,
                 intra_op_parallelism(
                     rank_threads,
                     static_cast<int>(std::max(1u, std::thread::hardware_concurrency())))) {}

 private:
  tbb::global_control control_;
};

}  // namespace dtsim::train
