// 1F1B, PipeDream-Flush (Narayanan et al. 2021; Megatron-LM's
// forward_backward_pipelining_without_interleaving): rank r runs w = min(p - r - 1, m)
// warm-up forwards, then alternates one forward and one backward until the forwards run
// out, then the remaining backwards (cool-down). A micro-batch's backward on rank r starts
// as soon as its gradient can arrive, so at most w + 1 = min(p - r, m) micro-batches are in
// flight: p on stage 0 instead of GPipe's m. Same bubble as GPipe, (p - 1)/(m + p - 1).
#include <algorithm>

#include "train/pipeline_parallel/schedule.h"

namespace dtsim::train::pipeline {

std::vector<std::vector<Action>> one_f_one_b_order(const ScheduleSpec& spec) {
  const int p = spec.stages, m = spec.micro_batches;
  std::vector<std::vector<Action>> ranks(p);
  for (int r = 0; r < p; ++r) {
    const int warmup = std::min(p - r - 1, m);
    std::vector<Action>& out = ranks[r];
    for (int i = 0; i < warmup; ++i) out.push_back(forward(i, r));
    for (int i = 0; i < m - warmup; ++i) {  // steady state: forward i + w, backward i
      out.push_back(forward(warmup + i, r));
      out.push_back(backward(i, r));
    }
    for (int i = m - warmup; i < m; ++i) out.push_back(backward(i, r));
  }
  return ranks;
}

}  // namespace dtsim::train::pipeline
