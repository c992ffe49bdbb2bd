// ZeRO (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter
// Models", SC 2020), stages 1 to 3, over N data-parallel ranks that each take B/N samples.
//
// Stage 1 (optimizer state sharded): forward and backward run on the full replica with no
// collective until backward ends; then the gradients are all-reduced and divided by N, rank
// r updates only its shard r of the parameters with the optimizer state (and, in mixed
// precision, the fp32 master weights) it alone holds, and an all-gather of the updated
// shards restores the full parameters on every rank.
// Stage 2 (gradients sharded too): as stage 1, but backward's gradients are reduce-scattered,
// so rank r receives only the summed gradient of its shard; the same all-gather follows.
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
// layer is not gathered, so any read of an absent parameter poisons the loss. Memory is
// accounted in the strategy's own ledger (shard plus the gathered layer), not the model's.
#include <chrono>
#include <vector>

#include "model/memory.h"
#include "runtime/world.h"
#include "train/grad_ops.h"
#include "train/intra_op.h"
#include "train/run_frame.h"
#include "train/slice_optimizer.h"
#include "train/strategies.h"
#include "train/trainee.h"
#include "train/zero3_hooks.h"

namespace dtsim::train {
namespace {

using model::MemoryCategory;

// ZeRO-1 (stage 1) or ZeRO-2 (stage 2) on one rank.
void zero12_rank(const TrainConfig& config, Communicator& comm, RunFrame& frame) {
  const int rank = comm.rank(), n = comm.size();
  const bool stage2 = config.strategy == Strategy::kZero2;
  const MicroBatches micro(config, n);
  Trainee trainee(config);
  RankFrame me(frame, config, rank);
  RankTimeline& timeline = me.timeline();
  PhaseHooks hooks(&timeline);
  model::MemoryLedger ledger;  // this rank's model state, as ZeRO holds it
  model::ParamStore& store = trainee.store();
  with_buffers(store, [&](auto params, auto grads) {
    using T = typename decltype(grads)::value_type;
    const model::ParamRange mine = model::shard_range(params.size(), n, rank);
    const auto full_bytes = static_cast<int64_t>(params.size() * sizeof(T));
    ledger.add(MemoryCategory::kWeights, full_bytes);
    if (!stage2) ledger.add(MemoryCategory::kGradients, full_bytes);
    model::TrackedBuffer<T> shard_grads(&ledger, MemoryCategory::kGradients,
                                        stage2 ? mine.size() : 0);
    std::span<T> my_params = params.subspan(mine.begin, mine.size());
    auto opt = make_slice_optimizer(config, my_params, &ledger);
    for (int step = 0; step < config.steps; ++step) {
      const auto start = std::chrono::steady_clock::now();
      store.zero_grad();
      for (int m = 0; m < micro.count; ++m) {
        const float loss = trainee.forward_backward(step, micro.first(rank, m), micro.size,
                                                    micro.grad_scale(), &hooks);
        hooks.finish();
        frame.board.add(step, rank, loss, micro.size);
      }
      std::span<T> my_grads = grads.subspan(mine.begin, mine.size());
      if (stage2) {
        timeline.collective("reduce_scatter", comm, [&] {
          comm.reduce_scatter(std::span<const T>(grads), shard_grads.span(), ReduceOp::kSum,
                              reduce_scatter_algo(config.algo));
        });
        my_grads = shard_grads.span();
      } else {
        timeline.collective("all_reduce", comm,
                            [&] { comm.all_reduce(grads, ReduceOp::kSum, config.algo); });
      }
      if (config.pitfall != Pitfall::kForgetDivide) divide(my_grads, n);
      timeline.phase("optimizer", [&] { opt->step(my_params, my_grads); });
      timeline.collective("all_gather", comm, [&] {
        comm.all_gather(std::span<const T>(my_params), params, all_gather_algo(config.algo));
      });
      me.peak().observe(ledger, trainee.memory());
      me.end_step(start);
    }
    ledger.add(MemoryCategory::kWeights, -full_bytes);
    if (!stage2) ledger.add(MemoryCategory::kGradients, -full_bytes);
  });
  me.finish();
  if (rank == 0) frame.params = store.params_as_float();
}

// ZeRO-3 on one rank: the shard buffers, the hooks that gather and release layers, and
// the optimizer over the shard.
void zero3_rank(const TrainConfig& config, Communicator& comm, RunFrame& frame) {
  const int rank = comm.rank();
  const MicroBatches micro(config, comm.size());
  Trainee trainee(config);
  RankFrame me(frame, config, rank);
  RankTimeline& timeline = me.timeline();
  model::MemoryLedger ledger;
  model::ParamStore& store = trainee.store();
  const Zero3Layout layout(store.layout(), comm.size());
  with_buffers(store, [&](auto params, auto grads) {
    using T = typename decltype(grads)::value_type;
    model::TrackedBuffer<T> shard_params(&ledger, MemoryCategory::kWeights, layout.shard_size());
    model::TrackedBuffer<T> shard_grads(&ledger, MemoryCategory::kGradients, layout.shard_size());
    layout.take_shard(rank, std::span<const T>(params), shard_params.span());
    layout.poison_all(rank, params);
    auto opt = make_slice_optimizer(config, shard_params.span(), &ledger);
    Zero3Hooks<T> hooks(
        {&timeline, &comm, &config, &layout, &ledger, &trainee.memory(), &me.peak()}, params, grads,
        shard_params.span(), shard_grads.span());
    for (int step = 0; step < config.steps; ++step) {
      const auto start = std::chrono::steady_clock::now();
      std::fill(shard_grads.span().begin(), shard_grads.span().end(), T(0.0f));
      for (int m = 0; m < micro.count; ++m) {
        store.zero_grad();
        const float loss = trainee.forward_backward(step, micro.first(rank, m), micro.size,
                                                    micro.grad_scale(), &hooks);
        hooks.finish();
        frame.board.add(step, rank, loss, micro.size);
      }
      if (config.pitfall != Pitfall::kForgetDivide) divide(shard_grads.span(), comm.size());
      timeline.phase("optimizer", [&] { opt->step(shard_params.span(), shard_grads.span()); });
      me.peak().observe(ledger, trainee.memory());
      me.end_step(start);
    }
    layout.put_shard(rank, std::span<const T>(shard_params.span()), frame.params);
  });
  me.finish();
}

}  // namespace

RunResult run_zero(const TrainConfig& config) {
  RunFrame frame(config);
  if (config.strategy == Strategy::kZero3) {  // every rank writes its shards into it
    frame.params.assign(model_layout(config).size(), 0.0f);
  }
  IntraOpLimit intra_op(config.ranks);
  World world(config.ranks);
  world.run([&](Communicator& comm) {
    if (config.strategy == Strategy::kZero3) {
      zero3_rank(config, comm, frame);
    } else {
      zero12_rank(config, comm, frame);
    }
  });
  return collect(frame, world, config);
}

}  // namespace dtsim::train
