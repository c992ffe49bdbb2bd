// Megatron's tensor parallelism as a layer sees it: the f and g operators injected, so the
// layer never learns of ranks.
#pragma once

#include <functional>
#include <span>

namespace dtsim::model {

// A block's hidden width H split over `size` ranks: this one holds hidden units
// [rank H / size, (rank + 1) H / size) (the first linear's rows and bias, column-parallel;
// the second's columns, row-parallel), so the block's output is a partial sum that `reduce`
// completes (g: a sum over the ranks, in place), and so is its input gradient in backward
// (f's backward). size 1 is the plain layer.
struct HiddenSharding {
  int rank = 0;
  int size = 1;
  std::function<void(std::span<float>)> reduce;  // sum over the ranks; empty at size 1
};

}  // namespace dtsim::model
