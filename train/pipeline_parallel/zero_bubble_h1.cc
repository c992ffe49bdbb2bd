// ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", section 3.1). Backward splits
// into B, the input gradient the previous stage waits for, and W, the weight gradient
// nobody waits for. Rank r keeps 1F1B's bound (at most p - r micro-batches past their
// forward and before their B) and fills what would be idle slots with deferred W passes;
// a micro-batch's activations stay until its W, and rank r keeps at most 2p - 1 - r of them
// (held_bound), whatever m (without that cap W would wait for the drain: m kept). The
// order is found by list scheduling on unit slots (F = B = W = 1): in each slot a rank runs
// the next B if its gradient has arrived, else the next F if it has arrived and both bounds
// allow, else the oldest pending W. F, B and W each run in micro-batch order, so weight
// gradients accumulate in single-rank order. The paper's bubble for equal pass times is
// (p - 1)/(3 m + p - 1), a third of 1F1B's; schedule_check measures ours, which with the cap
// is still the formula for m >= p (pipeline_schedule_test).
#include <algorithm>
#include <deque>

#include "train/pipeline_parallel/schedule.h"

namespace dtsim::train::pipeline {

std::vector<std::vector<Action>> zero_bubble_h1_order(const ScheduleSpec& spec) {
  const int p = spec.stages, m = spec.micro_batches;
  constexpr int kNever = 1 << 30;
  // Slot at whose end rank r finished F / B of micro-batch i.
  std::vector<std::vector<int>> f_done(p, std::vector<int>(m, kNever));
  std::vector<std::vector<int>> b_done(p, std::vector<int>(m, kNever));
  std::vector<int> next_f(p, 0), next_b(p, 0), w_done(p, 0);
  std::vector<std::deque<int>> pending_w(p);
  std::vector<std::vector<Action>> ranks(p);
  int finished = 0;
  for (int t = 0; finished < p; ++t) {
    for (int r = 0; r < p; ++r) {
      const int f = next_f[r], b = next_b[r];
      if (f == m && b == m && pending_w[r].empty()) continue;
      const bool b_ready = b < m && f_done[r][b] <= t && (r == p - 1 || b_done[r + 1][b] <= t);
      const bool f_ready = f < m && (r == 0 || f_done[r - 1][f] <= t) && f - b < p - r &&
                           f - w_done[r] < 2 * p - 1 - r;
      if (b_ready) {
        ranks[r].push_back({Op::kBackwardInput, b, r, -1});
        b_done[r][b] = t + 1;
        pending_w[r].push_back(b);
        ++next_b[r];
      } else if (f_ready) {
        ranks[r].push_back(forward(f, r));
        f_done[r][f] = t + 1;
        ++next_f[r];
      } else if (!pending_w[r].empty()) {
        ranks[r].push_back({Op::kBackwardWeight, pending_w[r].front(), r, -1});
        pending_w[r].pop_front();
        ++w_done[r];
      }
      if (next_f[r] == m && next_b[r] == m && pending_w[r].empty()) ++finished;
    }
  }
  return ranks;
}

}  // namespace dtsim::train::pipeline
