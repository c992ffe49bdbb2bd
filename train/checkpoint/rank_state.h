// What a checkpoint reads from and writes into one rank: its parameter buffers in their local
// layouts, and the optimizers that hold state for runs of them. A strategy exposes this
// (RankStrategy::checkpoint_state); the checkpoint code maps it onto the full model's tensors
// by name and the run's placements, so it never learns which strategy it serves.
//
// Thread safety: used by the rank's own thread only.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "model/param_layout.h"
#include "train/slice_optimizer.h"

namespace dtsim::train::checkpoint {

// `count` elements at `local` of a part's layout whose optimizer state sits at `at` of
// `opt`'s slice. `writer`: this rank saves them (exactly one rank of the copies that hold
// them, e.g. data-parallel rank 0 under ZeRO 0, the shard's owner under ZeRO 1-3).
struct OptimizerRun {
  SliceOptimizer* opt = nullptr;
  size_t at = 0;
  size_t local = 0;
  size_t count = 0;
  bool writer = true;
};

// One parameter buffer of a rank (a replica, a tensor-parallel slice, a pipeline chunk).
class StateAccess {
 public:
  virtual ~StateAccess() = default;
  // Every run of the buffer whose optimizer state this rank holds, in local order.
  virtual std::vector<OptimizerRun> optimizer_runs() = 0;
  // The buffer's parameters in fp32 (a copy); under ZeRO-3 only the runs' elements are real.
  virtual std::vector<float> params() const = 0;
  // Sets the parameters from `local` (fp32, the whole local layout): the elements this rank
  // holds are taken (all of them, or ZeRO-3's shard), stored in the buffer's type.
  virtual void load_params(std::span<const float> local) = 0;
  // Whether load_params() takes every element (false: only the optimizer runs', ZeRO-3's
  // shard), so that a resume reads only what it keeps.
  virtual bool keeps_all_params() const = 0;
  // Local elements [begin, begin + count) in the buffer's own fp32 storage (ZeRO-3: the
  // shard), for a save to write from and a resume to read into with no copy and no fresh
  // pages; empty when the buffer holds another type (bf16) or this rank does not keep them.
  virtual std::span<float> fp32_params(size_t /*begin*/, size_t /*count*/) { return {}; }
  // After a resume wrote every element it keeps through fp32_params(): brings the copies
  // derived from them (ZeRO-3's full buffer, ZeRO-1/2's packed parts) up to date.
  virtual void fp32_params_loaded() {}
};

struct StatePart {
  const model::ParamLayout* layout = nullptr;  // the buffer's local layout
  StateAccess* access = nullptr;
};

// A rank's parts; empty when its strategy has no checkpoint support. Where each tensor's
// block sits in the global tensor, and which copy of a replicated one is saved, is the run's
// placement's (train/placement_plan.h).
struct RankState {
  std::vector<StatePart> parts;
};

}  // namespace dtsim::train::checkpoint
