// Megatron's tensor parallelism as a layer sees it: the f and g operators injected, so the
// layer never learns of ranks.
#pragma once

#include <functional>
#include <span>
#include <string>

#include "model/param_layout.h"

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

// Appends a two-linear block's tensors "<prefix>.w1" (h, D), ".b1" (h), ".w2" (D, h), ".b2"
// (D) for the h of its full_hidden units that rank `rank` holds (an MLP block, or an MoE
// expert), each a TensorShard of the whole tensor; the whole block when h = full_hidden.
void add_sharded_ffn_params(ParamLayout& layout, const std::string& prefix, int dim, int hidden,
                            int full_hidden, int rank);

}  // namespace dtsim::model
