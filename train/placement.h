// Placements (DTensor's, on dtsim's mesh): how every parameter, gradient and optimizer state
// lies on each mesh axis, and which rank of a data-parallel group owns which ZeRO shard.
// train/placement_plan.h builds the whole model's description from a run's config; this
// header holds the vocabulary and the ownership arithmetic that the data-parallel wrapper,
// the memory plan, the report, estimate and checkpoints share.
//
// On one axis a tensor is
//   replicate   every rank of the axis holds all of it;
//   shard(d)    split along dimension d (0 rows, 1 columns) as torch.tensor_split: sizes
//               differ by at most one, larger first (model::shard_range);
//   partial     every rank holds a summand and the tensor is their sum (a gradient before
//               the data-parallel sync);
//   held(k)     only coordinate k of the axis holds it (a pipeline stage's layers; an expert-
//               parallel rank's experts), which DTensor leaves to the module split;
//   zero-shard  ZeRO: the rank's flat buffer is split over the data-parallel group, so a
//               tensor may be cut anywhere (ZeRO 1-2: each part packed and split as
//               tensor_split; ZeRO-3: each layer's run padded to a multiple of the group, as
//               FSDP pads, each rank a ceil(n / size) piece).
//
// Thread safety: pure functions, except ScopedZeroOwner (see there).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "model/param_layout.h"
#include "train/mesh_shape.h"

namespace dtsim::train {

// Placements are per MeshAxis (mesh_shape.h). ep lies inside dp, so an expert's dp
// placement is over the ranks that hold the same experts (MeshShape::expert_dp()).
struct AxisPlacement {
  enum class Kind { kReplicate, kShard, kPartial, kHeld, kZeroShard };
  Kind kind = Kind::kReplicate;
  int dim = 0;    // kShard: the dimension split
  int index = 0;  // kHeld: the coordinate that holds it

  static AxisPlacement replicate() { return {}; }
  static AxisPlacement shard(int dim) { return {Kind::kShard, dim, 0}; }
  static AxisPlacement partial() { return {Kind::kPartial, 0, 0}; }
  static AxisPlacement held(int index) { return {Kind::kHeld, 0, index}; }
  static AxisPlacement zero_shard() { return {Kind::kZeroShard, 0, 0}; }
  // "replicate", "shard(0)", "partial", "held(1)", "zero-shard".
  std::string str() const;
  bool operator==(const AxisPlacement&) const = default;
};

// A rank's buffer split by the data-parallel group that holds the same values.
struct DpParts {
  std::vector<model::ParamRange> dense;    // copies on every rank of dp
  std::vector<model::ParamRange> experts;  // copies on the ranks of expert_dp
  // The whole buffer of `layout` as one dense part (no expert parallelism).
  static DpParts whole(const model::ParamLayout& layout) { return {{{0, layout.size()}}, {}}; }
};

// The ZeRO shard index rank `rank` of a group of `size` owns: `rank` itself (a planted bug,
// ScopedZeroOwner, may say otherwise).
int zero_shard_index(int rank, int size);
// Throws std::logic_error naming the ranks when the owners of a group of `size` do not take
// each shard exactly once (two ranks on one shard, one shard without an owner).
void check_zero_owners(int size);

// ZeRO 1-2: the elements of a packed part of `n` that rank `rank` of `size` owns.
model::ParamRange zero_shard(size_t n, int size, int rank);

// One layer's run of one part under ZeRO-3, sharded on its own over the part's group.
struct Zero3Segment {
  int layer = 0;
  int part = 0;  // 0 dense, 1 experts
  model::ParamRange range;
  int group = 1;      // the part's group size
  size_t shard = 0;   // per-rank shard elements: ceil(range / group)
  size_t offset = 0;  // where this rank's shard of it starts in the shard buffer
};

// The segments of `layout` under `parts` with groups of `sizes[part]` ranks, in flat order.
std::vector<Zero3Segment> zero3_segments(const model::ParamLayout& layout, const DpParts& parts,
                                         const int sizes[2]);
// The real (unpadded) elements that rank `rank` of its group owns of segment `s`.
model::ParamRange zero3_owned(const Zero3Segment& s, int rank);

// For tests that plant a wrong ZeRO owner: while alive, rank r of a group of n owns shard
// owner(r, n) instead of r. Create and destroy it while no run is in flight; reads from rank
// threads are safe in between.
class ScopedZeroOwner {
 public:
  using Owner = int (*)(int rank, int size);
  explicit ScopedZeroOwner(Owner owner);
  ~ScopedZeroOwner();
  ScopedZeroOwner(const ScopedZeroOwner&) = delete;
  ScopedZeroOwner& operator=(const ScopedZeroOwner&) = delete;

 private:
  Owner previous_;
};

}  // namespace dtsim::train
