// DDP's gradient buckets (Li et al., "PyTorch Distributed", VLDB 2020); the sync itself is
// DataParallel's (data_parallel.h).
//
// Every rank holds a full replica of the parameters, gradients and optimizer state. Each
// step, rank r takes its B/N samples of the global batch (M micro-batches of B/(N*M), which
// it accumulates locally with no communication: no_sync), runs forward with no collective,
// and in backward all-reduces the gradients, then divides them by N, so that every replica
// holds the mean gradient and takes the identical optimizer step. The all-reduce is cut into
// buckets of whole layers (TrainConfig::bucket_bytes) filled in backward order; a bucket's
// all-reduce launches from LayerHooks::after_backward as soon as the last layer that fills
// it has its final gradient (on the last micro-batch only), which is where real DDP overlaps
// communication with the rest of backward. bucket_bytes == 0 runs the plain version beside
// it: one all-reduce of every gradient after backward. Pitfall::kForgetDivide skips the
// division, so the step is N times too large (the lesson's first pitfall).
//
// Under Algo::kDeterministic the sum runs in rank order, so this is bitwise equal to
// run_accum with the same ranks and micro-batches (reference.cc). For MoE, that
// accumulation is also the only exact reference: routing, capacity and the aux loss depend
// on which tokens are batched together.
#include "train/data_parallel/ddp.h"

#include <vector>

namespace dtsim::train {

std::vector<GradBucket> ddp_buckets(const model::ParamLayout& layout, size_t elem_bytes,
                                    size_t bucket_bytes) {
  std::vector<GradBucket> buckets;
  if (bucket_bytes == 0) return buckets;
  GradBucket open{-1, -1, {}};
  for (int l = layout.num_layers() - 1; l >= 0; --l) {
    const model::ParamRange r = layout.layer_range(l);
    if (open.last_layer < 0) open = {l, l, r};
    open.first_layer = l;
    open.range.begin = r.begin;
    if (open.range.size() * elem_bytes >= bucket_bytes || l == 0) {
      buckets.push_back(open);
      open = {-1, -1, {}};
    }
  }
  return buckets;
}

}  // namespace dtsim::train
