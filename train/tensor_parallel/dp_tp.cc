// DP x TP: data parallelism over tensor-parallel groups on a 2-D grid of ranks (Megatron-LM's
// "model + data parallel" layout; 4 ranks as 2 x 2, 8 ranks as 4 x 2 with --tp 2).
//
// N ranks form N / T data-parallel replicas of T-wide tensor-parallel groups. Rank g sits at
// (dp, tp) = (g / T, g % T): TP groups are T consecutive ranks (the fast, intra-node axis in a
// real cluster), DP groups gather the ranks with the same tp position across the replicas.
// Both come from the Mesh (mesh.h), by Communicator::split (one all_gather each).
// Inside a replica everything is tensor_parallel.cc's Megatron MLP: one all_reduce per block
// in forward and one per block but the first in backward, on the TP group, over the replica's
// B / (N / T) samples. After backward each rank all-reduces its whole gradient shard (1/T of
// the blocks plus the replicated head) across its DP group, DDP style, in one call; the
// gradients already carry 1/B, so the sum is the mean over the global batch and no division
// follows (with --zero 1 or 2 the DP sync is ZeRO's reduce-scatter and all-gather instead,
// data_parallel/zero12_sync.h). Every rank then steps its own shard. A step therefore costs 2L - 1
// all_reduces of B/(N/T) x D activations on the TP group and one all_reduce of Psi_local gradients
// on the DP group.
#include "train/strategies.h"

namespace dtsim::train {

std::optional<RunResult> run_dp_tp(const TrainConfig& config) {
  return run_tensor_parallel(config, config.mesh());
}

}  // namespace dtsim::train
