// Distributed data parallel (Li et al., "PyTorch Distributed", VLDB 2020).
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

#include <memory>
#include <utility>
#include <vector>

#include "train/accounting.h"
#include "train/grad_ops.h"
#include "train/launch.h"
#include "train/slice_optimizer.h"
#include "train/strategies.h"
#include "train/trainee.h"

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

namespace {

// Launches each bucket's all-reduce (then the division by N) from after_backward of the
// bucket's first layer, the last of its layers that backward finishes.
template <class T>
class DdpHooks : public PhaseHooks {
 public:
  DdpHooks(RankTimeline* timeline, Communicator& comm, const TrainConfig& config,
           std::vector<GradBucket> buckets, std::span<T> grads)
      : PhaseHooks(timeline),
        comm_(comm),
        config_(config),
        buckets_(std::move(buckets)),
        grads_(grads) {}

  // Only the last micro-batch of a step synchronises (no_sync before it).
  void set_sync(bool sync) { sync_ = sync; }

  void after_backward(int layer) override {
    if (!sync_) return;
    for (const GradBucket& b : buckets_) {
      if (b.first_layer == layer) reduce(grads_.subspan(b.range.begin, b.range.size()));
    }
  }

  // All-reduces `g` over the ranks and divides by N (unless the pitfall is selected).
  void reduce(std::span<T> g) {
    timeline_->collective("all_reduce", comm_,
                          [&] { comm_.all_reduce(g, ReduceOp::kSum, config_.algo); });
    if (config_.pitfall != Pitfall::kForgetDivide) divide(g, comm_.size());
  }

  bool bucketed() const { return !buckets_.empty(); }
  int rank() const { return comm_.rank(); }

 private:
  Communicator& comm_;
  const TrainConfig& config_;
  std::vector<GradBucket> buckets_;
  std::span<T> grads_;
  bool sync_ = true;
};

// DDP on one rank: a full replica, its M micro-batches, the bucket hooks.
template <class T>
class DdpRank : public RankStrategy {
 public:
  DdpRank(const TrainConfig& config, Communicator& comm, Trainee& trainee, StepRunner& runner,
          std::span<T> params, std::span<T> grads)
      : trainee_(trainee),
        params_(params),
        grads_(grads),
        opt_(make_slice_optimizer(config, params, &trainee.memory())),
        hooks_(&runner.timeline(), comm, config,
               ddp_buckets(trainee.store().layout(), sizeof(T), config.bucket_bytes), grads),
        micro_(data_parallel_micro_batches(config, comm.size(), comm.rank())) {}

  // Micro-batch 0 writes the gradients (no zero_grad); a bucket's hook runs after its
  // layers' backward has written or added their gradients, so it reduces the final sums.
  std::vector<MicroBatch> micro_batches() const override { return micro_; }
  // Only the last micro-batch of a step synchronises (no_sync before it).
  void before_micro_batch(int i) override { hooks_.set_sync(i == int(micro_.size()) - 1); }
  float forward_backward(int step, const MicroBatch& mb) override {
    return run_micro_batch(trainee_, step, mb, hooks_);
  }
  void sync_gradients() override {
    if (!hooks_.bucketed()) hooks_.reduce(grads_);
  }
  void optimizer_step() override { opt_->step(params_, grads_); }
  void observe_memory(PeakMemory& peak) override { peak.observe(trainee_.memory()); }
  // Every replica holds the same parameters; rank 0's are the result.
  std::vector<float> final_params() override {
    return hooks_.rank() == 0 ? trainee_.store().params_as_float() : std::vector<float>{};
  }

 private:
  Trainee& trainee_;
  std::span<T> params_, grads_;
  std::unique_ptr<SliceOptimizer> opt_;
  DdpHooks<T> hooks_;
  std::vector<MicroBatch> micro_;
};

}  // namespace

std::optional<RunResult> run_ddp(const TrainConfig& config) {
  return launch_replicated<DdpRank>(config);
}

}  // namespace dtsim::train
