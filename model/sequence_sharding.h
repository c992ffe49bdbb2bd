// Megatron's sequence parallelism (Korthikanti et al. 2022) as a layer sees it: the tensor-
// parallel split of HiddenSharding (hidden_sharding.h) with g and f each turned into an
// all-gather plus a reduce-scatter, for the layers that take it (the GPT's, gpt_layers.h).
// The layer's input and output then hold this rank's 1/size of every sample's tokens;
// `all_gather` completes the normalised input before the column-parallel linear (its
// backward: the reduce-scatter of the input gradient), `reduce_scatter` sums the row-
// parallel partial output and keeps this rank's tokens (its backward: the all-gather of the
// output gradient). Both work on rank-major chunks as Communicator's do: all_gather(in, out)
// puts rank r's `in` at out[r n, (r + 1) n); reduce_scatter(in, out) sums chunk r of `in`
// (n = out.size()) over the ranks into rank r's `out`. Without them (the default) it is
// plain tensor parallelism, or the plain layer at size 1.
#pragma once

#include <functional>
#include <span>

#include "model/hidden_sharding.h"

namespace dtsim::model {

struct SequenceSharding : HiddenSharding {
  std::function<void(std::span<const float> in, std::span<float> out)> all_gather;
  std::function<void(std::span<const float> in, std::span<float> out)> reduce_scatter;
  bool sequence_parallel() const { return static_cast<bool>(all_gather); }
};

}  // namespace dtsim::model
