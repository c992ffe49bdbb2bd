// One rank's ZeRO-3 state over a parameter buffer: its shard of the parameters (taken from
// the full buffer, which is poisoned outside the layer being used), the shard's gradients,
// the optimizer over the shard, and the hooks that gather each layer around its use and
// reduce-scatter its gradients after its backward. Zero3Rank (zero.cc) holds one over the
// whole model; TpRank (tensor_parallel.cc) over its tensor-parallel slice.
// Thread safety: one per rank, used only by that rank's thread. Not movable: the hooks hold
// its ledger's address.
#pragma once

#include <algorithm>
#include <memory>
#include <span>
#include <vector>

#include "model/memory.h"
#include "runtime/communicator.h"
#include "train/data_parallel/zero3_hooks.h"
#include "train/grad_ops.h"
#include "train/slice_optimizer.h"
#include "train/step_runner.h"
#include "train/trainee.h"

namespace dtsim::train {

template <class T>
class Zero3Shard {
 public:
  // `group` is the data-parallel group the layers are sharded over; `layout` must outlive this.
  Zero3Shard(const TrainConfig& config, Communicator& group, Trainee& trainee, StepRunner& runner,
             const Zero3Layout& layout, std::span<T> params, std::span<T> grads)
      : shard_params_(&ledger_, model::MemoryCategory::kWeights, layout.shard_size()),
        shard_grads_(&ledger_, model::MemoryCategory::kGradients, layout.shard_size()) {
    layout.take_shard(group.rank(), std::span<const T>(params), shard_params_.span());
    layout.poison_all(group.rank(), params);
    runner.add_gradients(shard_grads_.span());
    opt_ = make_slice_optimizer(config, shard_params_.span(), &ledger_);
    hooks_ =
        std::make_unique<Zero3Hooks<T>>(Zero3Context{&runner.timeline(), &group, &config, &layout,
                                                     &ledger_, &trainee.memory(), &runner.peak()},
                                        params, grads, shard_params_.span(), shard_grads_.span());
  }
  Zero3Shard(const Zero3Shard&) = delete;
  Zero3Shard& operator=(const Zero3Shard&) = delete;

  Zero3Hooks<T>& hooks() { return *hooks_; }
  // ZeRO-3's gradient-writing rule, in one place for every strategy that holds a shard: its
  // RankStrategy's micro_batches() passes its micro-batches through micro_batches(), and its
  // before_micro_batch() calls before_micro_batch(). micro_batches() is a pure function;
  // before_micro_batch() only on the rank's thread, like the rest of the class.
  // The hooks free each layer's gradients once reduce-scattered, so every micro-batch's
  // backward writes the model's gradients (MicroBatch::write_grads): returns `micro` with it
  // set on all of them.
  static std::vector<MicroBatch> micro_batches(std::vector<MicroBatch> micro) {
    for (MicroBatch& mb : micro) mb.write_grads = true;
    return micro;
  }
  // Before micro-batch `index` of the step: the first one's reduce-scatters write the shard's
  // gradients, the others add into them.
  void before_micro_batch(int index) { hooks_->set_write_shard(index == 0); }
  // The shard's summed gradients: the hooks reduce-scatter every micro-batch into them, the
  // step's first writing them (before_micro_batch).
  std::span<T> grads() { return shard_grads_.span(); }
  void optimizer_step() { opt_->step(shard_params_.span(), grads()); }
  // The shards and gathered layers, beside the model's own ledger (activations).
  void observe_memory(PeakMemory& peak, const model::MemoryLedger& model_memory) const {
    peak.observe(ledger_, model_memory);
  }
  // The shard, widened; the launcher puts every rank's into place (Zero3Layout::put_shard).
  std::vector<float> final_params() const {
    std::vector<float> out(shard_params_.size());
    for (size_t i = 0; i < out.size(); ++i) out[i] = widen(shard_params_.data()[i]);
    return out;
  }

 private:
  model::MemoryLedger ledger_;  // first: the buffers below register with it
  model::TrackedBuffer<T> shard_params_, shard_grads_;
  std::unique_ptr<SliceOptimizer> opt_;
  std::unique_ptr<Zero3Hooks<T>> hooks_;
};

}  // namespace dtsim::train
