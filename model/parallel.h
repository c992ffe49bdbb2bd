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
#include <utility>

namespace dtsim::model {

// Rows per block of the elementwise kernels, fixed so results never depend on scheduling.
inline constexpr int kRowBlock = 32;
// A GEMM is cut into slices along one weight dimension: a slice packs only its own part of
// W, but repacks the small batch operand, so a slice must carry enough multiply-adds.
inline constexpr int64_t kGemmSliceWork = int64_t{1} << 23;

// Slice width along a GEMM dimension of `dim` for `work` multiply-adds in all: as many
// slices as keep each at >= kGemmSliceWork (at least one), widths a multiple of 64. A
// function of the shape only, so the bits never depend on the thread count.
inline int gemm_slice_width(int dim, int64_t work) {
  const int64_t slices = std::clamp<int64_t>(work / kGemmSliceWork, 1, std::max(1, dim / 64));
  const int width = static_cast<int>((dim + slices - 1) / slices);
  return (width + 63) / 64 * 64;
}
// Below this many multiply-adds a kernel stays on the calling thread.
inline constexpr int64_t kParallelWork = int64_t{1} << 18;

// Calls fn(begin, end) for each `block`-item block of [0, items); in parallel via oneTBB
// when items * work_per_item >= kParallelWork, serially otherwise. Blocks depend only on
// (items, block), never on the thread count.
template <class Fn>
void for_blocks(int items, int block, int64_t work_per_item, Fn&& fn) {
  const int blocks = (items + block - 1) / block;
  auto run = [&](int b) { fn(b * block, std::min(items, (b + 1) * block)); };
  if (blocks <= 1 || int64_t{items} * work_per_item < kParallelWork) {
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

// for_blocks over kRowBlock-row blocks of [0, rows).
template <class Fn>
void for_row_blocks(int rows, int64_t work_per_row, Fn&& fn) {
  for_blocks(rows, kRowBlock, work_per_row, std::forward<Fn>(fn));
}

}  // namespace dtsim::model
