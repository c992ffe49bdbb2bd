// ZeRO (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter
// Models", SC 2020), stages 1 to 3, over N data-parallel ranks that each take B/N samples.
//
// Stage 1 (optimizer state sharded): forward and backward run on the full replica with no
// collective until backward ends; then the gradients are reduce-scattered, so rank r
// receives the summed gradient of its shard r only (it updates nothing else), divides it by
// N, updates its shard of the parameters with the optimizer state (and, in mixed precision,
// the fp32 master weights) it alone holds, and an all-gather of the updated shards restores
// the full parameters on every rank. That is the paper's section 7: a reduce-scatter and an
// all-gather, 2 Psi per step like DDP's all-reduce, not an all-reduce plus an all-gather.
// Stage 2 (gradients sharded too): the same collectives; the difference is memory: stage 1
// keeps the full gradient buffer for the whole step, stage 2 holds only its shard's.
// Stages 1 and 2 shard the flat vector with the runtime's tensor_split chunks (sizes differ
// by at most one element, the only padding they need). The full gradient buffer the model's
// kernels write is not counted for stage 2: ZeRO-2 frees it bucket by bucket as the
// reduce-scatter consumes it.
// Stage 3 (parameters sharded too, FSDP-style): every layer is sharded on its own, padded to
// a multiple of N as FSDP pads, so rank r holds 1/N of every layer's parameters, gradients
// and optimizer state. Before each layer's forward its parameters are all-gathered and freed
// after it; before its backward they are all-gathered again, and after it its gradients are
// reduce-scattered into the owner's shard and freed: per layer, two all-gathers and one
// reduce-scatter per micro-batch. The model's ParamStore is a full-size buffer, so "freed"
// is made honest: the elements a rank does not own are overwritten with NaN whenever the
// layer is not gathered, so any read of an absent parameter poisons the loss; a layer's
// gradients become NaN once reduce-scattered, and each micro-batch's backward writes them.
// Memory is accounted in the strategy's own ledger (shard plus the gathered layer), not the
// model's.
#include <memory>
#include <vector>

#include "model/memory.h"
#include "train/data_parallel/zero12_sync.h"
#include "train/data_parallel/zero3_hooks.h"
#include "train/data_parallel/zero3_shard.h"
#include "train/grad_ops.h"
#include "train/launch.h"
#include "train/slice_optimizer.h"
#include "train/strategies.h"
#include "train/trainee.h"

namespace dtsim::train {
namespace {

using model::MemoryCategory;

// ZeRO-1 (stage 1) or ZeRO-2 (stage 2) on one rank: the full replica, and ZeroSync
// (zero12_sync.h) over the world.
template <class T>
class Zero12Rank : public RankStrategy {
 public:
  Zero12Rank(const TrainConfig& config, Communicator& comm, Trainee& trainee, StepRunner& runner,
             std::span<T> params, std::span<T> grads)
      : comm_(comm),
        trainee_(trainee),
        hooks_(&runner.timeline()),
        sync_(config, comm, runner.timeline(), config.strategy == Strategy::kZero2 ? 2 : 1,
              /*divide=*/config.pitfall != Pitfall::kForgetDivide, params, grads),
        micro_(data_parallel_micro_batches(config, comm.size(), comm.rank())) {}

  // Micro-batch 0 writes the full gradient buffer, the others add; the reduce-scatter
  // reads it once backward has ended.
  std::vector<MicroBatch> micro_batches() const override { return micro_; }
  float forward_backward(int step, const MicroBatch& mb) override {
    return run_micro_batch(trainee_, step, mb, hooks_);
  }
  void sync_gradients() override { sync_.sync_gradients(); }
  void optimizer_step() override { sync_.optimizer_step(); }
  void sync_params() override { sync_.sync_params(); }
  void observe_memory(PeakMemory& peak) override {
    peak.observe(sync_.ledger(), trainee_.memory());
  }
  // After the last all-gather every rank holds the full parameters; rank 0's are the result.
  std::vector<float> final_params() override {
    return comm_.rank() == 0 ? trainee_.store().params_as_float() : std::vector<float>{};
  }

 private:
  Communicator& comm_;
  Trainee& trainee_;
  PhaseHooks hooks_;
  ZeroSync<T> sync_;
  std::vector<MicroBatch> micro_;
};

// ZeRO-3 on one rank: the shard buffers, the hooks that gather and release layers, and
// the optimizer over the shard.
template <class T>
class Zero3Rank : public RankStrategy {
 public:
  Zero3Rank(const TrainConfig& config, Communicator& comm, Trainee& trainee, StepRunner& runner,
            const Zero3Layout& layout, std::span<T> params, std::span<T> grads)
      : config_(config),
        comm_(comm),
        trainee_(trainee),
        shard_(config, comm, trainee, runner, layout, params, grads),
        micro_(Zero3Shard<T>::micro_batches(
            data_parallel_micro_batches(config, comm.size(), comm.rank()))) {}

  std::vector<MicroBatch> micro_batches() const override { return micro_; }
  void before_micro_batch(int index) override { shard_.before_micro_batch(index); }
  float forward_backward(int step, const MicroBatch& mb) override {
    return run_micro_batch(trainee_, step, mb, shard_.hooks());
  }
  void sync_gradients() override {
    if (config_.pitfall != Pitfall::kForgetDivide) divide(shard_.grads(), comm_.size());
  }
  void optimizer_step() override { shard_.optimizer_step(); }
  void observe_memory(PeakMemory& peak) override { shard_.observe_memory(peak, trainee_.memory()); }
  // Rank 0 puts every rank's shard into place (Zero3Layout::put_shard).
  std::vector<float> final_params() override { return shard_.final_params(); }

 private:
  const TrainConfig& config_;
  Communicator& comm_;
  Trainee& trainee_;
  Zero3Shard<T> shard_;
  std::vector<MicroBatch> micro_;
};

}  // namespace

std::optional<RunResult> run_zero(const TrainConfig& config) {
  if (config.strategy != Strategy::kZero3) return launch_replicated<Zero12Rank>(config);
  const Zero3Layout layout(model_layout(config), config.ranks);
  return launch(
      config,
      [&](Communicator& comm, StepRunner& runner) {
        Trainee trainee(config);
        run_rank<Zero3Rank>(runner, trainee, config, comm, trainee, runner, layout);
      },
      [&](std::vector<std::vector<float>>& shards) {
        std::vector<float> full(model_layout(config).size());
        for (int r = 0; r < static_cast<int>(shards.size()); ++r) {
          layout.put_shard(r, std::span<const float>(shards[r]), full);
        }
        return full;
      });
}

}  // namespace dtsim::train
