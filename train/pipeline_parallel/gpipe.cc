// GPipe (Huang et al. 2019): each rank runs the forward of every micro-batch, then the
// backward of every micro-batch. Backward runs in micro-batch order 0..m-1 (the paper draws
// it reversed; with unit slots the bubble is the same), so weight gradients accumulate in
// single-rank order. Every micro-batch's activations are held at the end of the forwards:
// m in flight on every stage. Bubble (p - 1)/(m + p - 1).
#include "train/pipeline_parallel/schedule.h"

namespace dtsim::train::pipeline {

std::vector<std::vector<Action>> gpipe_order(const ScheduleSpec& spec) {
  std::vector<std::vector<Action>> ranks(spec.stages);
  for (int r = 0; r < spec.stages; ++r) {
    for (int i = 0; i < spec.micro_batches; ++i) ranks[r].push_back(forward(i, r));
    for (int i = 0; i < spec.micro_batches; ++i) ranks[r].push_back(backward(i, r));
  }
  return ranks;
}

}  // namespace dtsim::train::pipeline
