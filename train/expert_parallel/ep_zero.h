// ZeRO-1 and -2 along the data axis of expert parallelism (DeepSpeed-MoE's layout): each
// parameter's optimizer state is sharded over the ranks that hold a copy of it. The
// replicated tensors (embedding, head, routers) are one part, sharded over the dp group;
// the rank's experts are another, sharded over expert_dp (the ranks holding the same
// experts; when dp = ep every rank's experts are its own, a part of one rank). A part's
// tensors are packed into one buffer: its gradients are reduce-scattered over the part's
// group and divided by dp (they carry the replica's mean, as DDP's do), the optimizer steps
// this rank's shard with state it alone holds, and an all-gather brings the updated shards
// back. The reduce-scatter and all-gather of a part are one all-reduce's traffic.
//
// Memory: Adam's state is the shard's, recorded in `ledger`; the packed buffers are scratch.
//
// Thread safety: one EpZeroPart belongs to one rank thread.
#pragma once

#include <algorithm>
#include <memory>
#include <span>
#include <vector>

#include "model/param_layout.h"
#include "runtime/communicator.h"
#include "train/accounting.h"
#include "train/config.h"
#include "train/data_parallel/zero3_hooks.h"  // reduce_scatter_algo, all_gather_algo
#include "train/grad_ops.h"
#include "train/slice_optimizer.h"

namespace dtsim::train {

template <class T>
class EpZeroPart {
 public:
  // The tensors `ranges` of the rank's flat `params`, sharded over `group` (null: this rank
  // alone holds them); the summed shard is divided by `divide_by` (the gradients carry
  // their replica's mean: dp).
  EpZeroPart(const TrainConfig& config, Communicator* group, std::vector<model::ParamRange> ranges,
             std::span<const T> params, model::MemoryLedger* ledger, int divide_by = 1)
      : config_(config), group_(group), ranges_(std::move(ranges)), divide_by_(divide_by) {
    size_t n = 0;
    for (const model::ParamRange& r : ranges_) n += r.size();
    packed_params_.resize(n);
    packed_grads_.resize(n);
    mine_ =
        group_ ? model::shard_range(n, group_->size(), group_->rank()) : model::ParamRange{0, n};
    shard_grads_.resize(mine_.size());
    pack(params, std::span<T>(packed_params_));
    opt_ = make_slice_optimizer(config, shard(packed_params_), ledger);
  }

  // Elements of this rank's shard.
  size_t shard_size() const { return mine_.size(); }
  // Elements of the part.
  size_t size() const { return packed_params_.size(); }

  // Packs the part's gradients and reduce-scatters them into the shard.
  void sync_gradients(std::span<const T> grads, RankTimeline& timeline) {
    pack(grads, std::span<T>(packed_grads_));
    if (group_ == nullptr) {
      std::copy(packed_grads_.begin(), packed_grads_.end(), shard_grads_.begin());
    } else {
      timeline.collective("reduce_scatter", *group_, [&] {
        group_->reduce_scatter(std::span<const T>(packed_grads_), std::span<T>(shard_grads_),
                               ReduceOp::kSum, reduce_scatter_algo(config_.algo));
      });
    }
    if (divide_by_ > 1) divide(std::span<T>(shard_grads_), divide_by_);
  }
  void optimizer_step() { opt_->step(shard(packed_params_), std::span<T>(shard_grads_)); }
  // All-gathers the updated shards and unpacks them into the rank's `params`.
  void sync_params(std::span<T> params, RankTimeline& timeline) {
    if (group_ != nullptr) {
      timeline.collective("all_gather", *group_, [&] {
        group_->all_gather(std::span<const T>(shard(packed_params_)), std::span<T>(packed_params_),
                           all_gather_algo(config_.algo));
      });
    }
    size_t at = 0;
    for (const model::ParamRange& r : ranges_) {
      std::copy_n(packed_params_.begin() + at, r.size(), params.begin() + r.begin);
      at += r.size();
    }
  }

 private:
  void pack(std::span<const T> from, std::span<T> to) const {
    size_t at = 0;
    for (const model::ParamRange& r : ranges_) {
      std::copy(from.begin() + r.begin, from.begin() + r.end, to.begin() + at);
      at += r.size();
    }
  }
  std::span<T> shard(std::vector<T>& packed) {
    return std::span<T>(packed).subspan(mine_.begin, mine_.size());
  }

  const TrainConfig& config_;
  Communicator* group_;
  std::vector<model::ParamRange> ranges_;
  int divide_by_;
  model::ParamRange mine_;
  std::vector<T> packed_params_, packed_grads_, shard_grads_;
  std::unique_ptr<SliceOptimizer> opt_;
};

}  // namespace dtsim::train
