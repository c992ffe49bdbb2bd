// Interleaved 1F1B (Narayanan et al. 2021, section 2.2; Megatron-LM's
// forward_backward_pipelining_with_interleaving). Each rank holds v model chunks: rank r
// holds chunks r, r + p, ..., r + (v - 1) p. Micro-batches run in groups of p: the k-th
// forward of every rank is micro-batch (k / (p v)) p + k % p of local chunk (k / p) % v,
// so a group goes through chunk 0 of every rank, then chunk 1, ...; backwards visit the
// local chunks in reverse. Rank r runs (p - r - 1) 2 + (v - 1) p warm-up forwards (all
// m v of them when m = p), then one forward, one backward. Each chunk is 1/v of a stage,
// so the bubble is (p - 1)/(v m + p - 1) in chunk slots, v times smaller than 1F1B's.
#include <algorithm>

#include "train/pipeline_parallel/schedule.h"

namespace dtsim::train::pipeline {
namespace {

// Virtual micro-batch k (0..m v - 1) of rank r: its micro-batch and global chunk.
Action nth(int k, int r, int p, int v, bool forward_pass) {
  const int in_group = k % (p * v);
  int local = in_group / p;
  if (!forward_pass) local = v - 1 - local;
  const int micro_batch = (k / (p * v)) * p + in_group % p;
  return {forward_pass ? Op::kForward : Op::kBackward, micro_batch, local * p + r, -1};
}

}  // namespace

std::vector<std::vector<Action>> interleaved_order(const ScheduleSpec& spec) {
  const int p = spec.stages, m = spec.micro_batches, v = spec.virtual_stages;
  const int total = m * v;
  std::vector<std::vector<Action>> ranks(p);
  for (int r = 0; r < p; ++r) {
    const int warmup = m == p ? total : std::min((p - r - 1) * 2 + (v - 1) * p, total);
    std::vector<Action>& out = ranks[r];
    for (int k = 0; k < warmup; ++k) out.push_back(nth(k, r, p, v, true));
    for (int k = 0; k < total - warmup; ++k) {
      out.push_back(nth(warmup + k, r, p, v, true));
      out.push_back(nth(k, r, p, v, false));
    }
    for (int k = total - warmup; k < total; ++k) out.push_back(nth(k, r, p, v, false));
  }
  return ranks;
}

}  // namespace dtsim::train::pipeline
