// ZeRO stages 1 and 2 along a data-parallel group (zero.cc states the algorithm): after
// backward the gradients are reduce-scattered, so each rank holds the summed gradient of its
// shard only, the optimizer updates that shard with state it alone holds, and an all-gather
// of the updated shards restores the full parameters. Written once for every mesh: ZeRO over
// the whole world (zero1, zero2) and ZeRO along the dp axis of a dp x tp mesh.
//
// Memory: the sync keeps its own ledger of the model state as ZeRO holds it (the full
// weights; stage 1 the full gradient buffer, stage 2 only its shard's; optimizer state for
// the shard), to be observed beside the model's activations.
//
// Thread safety: one ZeroSync belongs to one rank thread.
#pragma once

#include <algorithm>
#include <memory>
#include <span>

#include "model/memory.h"
#include "model/param_layout.h"
#include "runtime/communicator.h"
#include "train/accounting.h"
#include "train/config.h"
#include "train/data_parallel/zero3_hooks.h"
#include "train/grad_ops.h"
#include "train/slice_optimizer.h"

namespace dtsim::train {

template <class T>
class ZeroSync {
 public:
  // Stage 1 or 2 over `dp` for the rank's full `params` and `grads`; `divide`: divide the
  // summed shard by dp.size() (gradients that carry the replica's mean, not 1/B).
  ZeroSync(const TrainConfig& config, Communicator& dp, RankTimeline& timeline, int stage,
           bool divide, std::span<T> params, std::span<T> grads)
      : config_(config),
        dp_(dp),
        timeline_(timeline),
        stage2_(stage == 2),
        divide_(divide),
        params_(params),
        grads_(grads),
        mine_(model::shard_range(params.size(), dp.size(), dp.rank())),
        full_bytes_(static_cast<int64_t>(params.size() * sizeof(T))),
        my_params_(params.subspan(mine_.begin, mine_.size())) {
    ledger_.add(model::MemoryCategory::kWeights, full_bytes_);
    if (!stage2_) ledger_.add(model::MemoryCategory::kGradients, full_bytes_);
    // Stage 2 holds only its shard's summed gradient; stage 1's lands in the shard's slice
    // of the full buffer it keeps (the reduce-scatter's output buffer is scratch, uncounted).
    shard_grads_ = model::TrackedBuffer<T>(stage2_ ? &ledger_ : nullptr,
                                           model::MemoryCategory::kGradients, mine_.size());
    opt_ = make_slice_optimizer(config, my_params_, &ledger_);
  }
  ~ZeroSync() {
    ledger_.add(model::MemoryCategory::kWeights, -full_bytes_);
    if (!stage2_) ledger_.add(model::MemoryCategory::kGradients, -full_bytes_);
  }
  ZeroSync(const ZeroSync&) = delete;
  ZeroSync& operator=(const ZeroSync&) = delete;

  // Reduce-scatter of the gradients (then the division, if asked).
  void sync_gradients() {
    timeline_.collective("reduce_scatter", dp_, [&] {
      dp_.reduce_scatter(std::span<const T>(grads_), shard_grads_.span(), ReduceOp::kSum,
                         reduce_scatter_algo(config_.algo));
    });
    my_grads_ = shard_grads_.span();
    if (!stage2_) {  // stage 1 keeps the full gradient buffer: the shard's sum goes there
      my_grads_ = grads_.subspan(mine_.begin, mine_.size());
      std::copy(shard_grads_.data(), shard_grads_.data() + mine_.size(), my_grads_.begin());
    }
    if (divide_) divide(my_grads_, dp_.size());
  }
  // The optimizer over this rank's shard.
  void optimizer_step() { opt_->step(my_params_, my_grads_); }
  // All-gather of the updated shards into the full parameters.
  void sync_params() {
    timeline_.collective("all_gather", dp_, [&] {
      dp_.all_gather(std::span<const T>(my_params_), params_, all_gather_algo(config_.algo));
    });
  }
  // The model state as ZeRO holds it.
  const model::MemoryLedger& ledger() const { return ledger_; }

 private:
  const TrainConfig& config_;
  Communicator& dp_;
  RankTimeline& timeline_;
  model::MemoryLedger ledger_;
  const bool stage2_, divide_;
  std::span<T> params_, grads_;
  const model::ParamRange mine_;
  const int64_t full_bytes_;
  std::span<T> my_params_, my_grads_;
  model::TrackedBuffer<T> shard_grads_;
  std::unique_ptr<SliceOptimizer> opt_;
};

}  // namespace dtsim::train
