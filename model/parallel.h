// Deterministic intra-op parallelism: work is cut into fixed-size row blocks that depend
// only on the problem size, never on the thread count, and each output element is written
// by exactly one block. The serial path (small problems) walks the same blocks, so a kernel
// gives the same bits with 1 thread, 2 threads, or from inside 64 concurrent rank threads.
#pragma once

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/partitioner.h>

#include <algorithm>
#include <cstdint>

namespace dtsim::model {

// Rows per block, fixed so results never depend on scheduling.
inline constexpr int kRowBlock = 32;
// Below this many multiply-adds a kernel stays on the calling thread.
inline constexpr int64_t kParallelWork = int64_t{1} << 18;

// Calls fn(row_begin, row_end) for each kRowBlock-row block of [0, rows); in parallel via
// oneTBB when rows * work_per_row >= kParallelWork, serially otherwise.
template <class Fn>
void for_row_blocks(int rows, int64_t work_per_row, Fn&& fn) {
  const int blocks = (rows + kRowBlock - 1) / kRowBlock;
  auto run = [&](int b) { fn(b * kRowBlock, std::min(rows, (b + 1) * kRowBlock)); };
  if (blocks <= 1 || int64_t{rows} * work_per_row < kParallelWork) {
    for (int b = 0; b < blocks; ++b) run(b);
    return;
  }
  tbb::parallel_for(
      tbb::blocked_range<int>(0, blocks, 1),
      [&](const tbb::blocked_range<int>& r) {
        for (int b = r.begin(); b != r.end(); ++b) run(b);
      },
      tbb::simple_partitioner());
}

}  // namespace dtsim::model
