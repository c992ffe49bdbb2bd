// DP x TP: data parallelism over tensor-parallel groups on a 2-D grid of ranks (Megatron-LM's
// "model + data parallel" layout; 4 ranks as 2 x 2, 8 ranks as 4 x 2 with --tp 2).
//
// N ranks form N / T data-parallel replicas of T-wide tensor-parallel groups. Rank g sits at
// (dp, tp) = (g / T, g % T): TP groups are T consecutive ranks (the fast, intra-node axis in a
// real cluster), DP groups gather the ranks with the same tp position across the replicas.
// Both come from Communicator::split (colour g / T for TP, g % T for DP; one all_gather each).
// Inside a replica everything is tensor_parallel.cc's Megatron MLP: one all_reduce per block
// in forward and one per block but the first in backward, on the TP group, over the replica's
// B / (N / T) samples. After backward each rank all-reduces its whole gradient shard (1/T of
// the blocks plus the replicated head) across its DP group, DDP style, in one call; the
// gradients already carry 1/B, so the sum is the mean over the global batch and no division
// follows. Every rank then steps its own shard. A step therefore costs 2L - 1 all_reduces of
// B/(N/T) x D activations on the TP group and one all_reduce of Psi_local gradients on the DP
// group.
#include <string>

#include "train/strategies.h"
#include "train/tp_grid.h"

namespace dtsim::train {

TpGrid make_tp_grid(Communicator& world, int tp_size) {
  TpGrid grid;
  const int rank = world.rank();
  if (tp_size == world.size()) {  // one replica: the world is the TP group
    grid.tp = &world;
    return grid;
  }
  grid.tp_owned = world.split(/*color=*/rank / tp_size, /*key=*/rank, "tp");
  grid.dp_owned = world.split(/*color=*/rank % tp_size, /*key=*/rank, "dp");
  grid.tp = grid.tp_owned.get();
  grid.dp = grid.dp_owned.get();
  grid.dp_index = rank / tp_size;
  if (grid.tp->size() != tp_size || grid.dp->size() != world.size() / tp_size) {
    throw UsageError("dp-tp: rank " + std::to_string(rank) + " got a TP group of " +
                     std::to_string(grid.tp->size()) + " and a DP group of " +
                     std::to_string(grid.dp->size()) + "; --ranks must be a multiple of --tp");
  }
  return grid;
}

std::optional<RunResult> run_dp_tp(const TrainConfig& config) {
  return run_tp_grid(config, config.tp_size);
}

}  // namespace dtsim::train
