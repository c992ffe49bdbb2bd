// DataParallel: the one data-parallel wrapper (picotron's DataParallel, torchtitan's
// fully_shard) over whatever model-parallel layout a rank holds: a whole replica, a tensor-
// or expert-parallel slice, or a pipeline chunk. Every strategy's gradient sync and ZeRO
// lives here and nowhere else.
//
// A rank's flat parameter buffer is split into parts by the group that holds the same
// values (DpParts): the dense part (every rank of the data-parallel group `dp` holds a copy)
// and, under expert parallelism, the experts (copies only on the `expert_dp` ranks that hold
// the same experts, as DeepSpeed-MoE and Megatron sync them). Gradients carry their replica's
// mean (1 / (B / dp)), so every part's sum is divided by the data-parallel width (the
// lesson's "divide by N"; Pitfall::kForgetDivide skips it).
//
//   ZeRO 0 (DDP, Li et al. 2020): all-reduce. With layer hooks and one contiguous part, in
//          buckets of whole layers launched from after_backward of the step's last
//          micro-batch (torch DDP's overlap; no_sync before it); otherwise one all-reduce per
//          part after backward.
//   ZeRO 1/2 (Rajbhandari et al. 2020): per part, reduce-scatter of the gradients, the
//          optimizer on this rank's shard with state it alone holds, all-gather of the updated
//          shards. Stage 1 keeps the full gradient buffer, stage 2 only its shard's.
//   ZeRO 3 (FSDP): every layer's run of each part is a segment sharded on its own over the
//          part's group (padded to a multiple of it, as FSDP pads). The hooks all-gather a
//          layer's segments before its forward and backward and free them after (the absent
//          elements are NaN, so a read of a freed parameter poisons the loss); after its
//          backward its gradients are reduce-scattered into the owner's shard and freed
//          (zeroed, so the next micro-batch's backward adds into zeros: bitwise a write).
//          A layer with expert segments stays gathered for the whole step and is
//          reduce-scattered in sync_gradients: expert parallelism completes its gradients
//          only at the step's end.
//
// Which rank owns which shard is the placement's (train/placement.h: zero_shard,
// zero3_segments, zero3_owned), checked to give each shard one owner before any work.
//
// Memory: model_state() is the model state as this rank holds it under its stage.
//
// Thread safety: one DataParallel per parameter buffer per rank thread.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <span>
#include <type_traits>
#include <vector>

#include "model/hooks.h"
#include "model/memory.h"
#include "model/param_layout.h"
#include "runtime/algorithms/registry.h"
#include "runtime/communicator.h"
#include "train/accounting.h"
#include "train/checkpoint/rank_state.h"
#include "train/config.h"
#include "train/data_parallel/ddp.h"
#include "train/grad_ops.h"
#include "train/placement.h"
#include "train/slice_optimizer.h"
#include "train/step_runner.h"

namespace dtsim::train {

// Reduce-scatter and all-gather have fewer algorithms than all-reduce: ZeRO runs the
// config's algorithm where the registry lists it for them, else their auto one.
inline Algo reduce_scatter_algo(Algo a) { return algorithm_or_auto(OpKind::kReduceScatter, a); }
inline Algo all_gather_algo(Algo a) { return algorithm_or_auto(OpKind::kAllGather, a); }

// What the wrapper borrows from its rank; all pointers outlive it.
struct DpContext {
  const TrainConfig* config = nullptr;
  int zero = 0;                       // ZeRO stage 0-3
  Communicator* dp = nullptr;         // the dense part's group (null: one replica)
  Communicator* expert_dp = nullptr;  // the experts' group (null: this rank alone)
  int replicas = 1;                   // data-parallel width: the divisor of every sum
  RankTimeline* timeline = nullptr;
  // Observes the rank's peak memory (called while ZeRO-3 holds a gathered layer); may be empty.
  std::function<void()> observe;
  bool layer_hooks = true;  // backward calls after_backward per layer (buckets possible)
  bool time_phases = true;  // the hooks open "forward" / "backward" phases on the timeline
};

template <class T>
class DataParallel : public checkpoint::StateAccess {
 public:
  DataParallel(DpContext ctx, const model::ParamLayout& layout, DpParts parts, std::span<T> params,
               std::span<T> grads);
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  int zero() const { return zero_; }
  // The hooks to run forward and backward with (phase timing, buckets, ZeRO-3's gathers).
  PhaseHooks& hooks() { return *hooks_; }
  // Before micro-batch `index` of `count` in the step (no_sync, ZeRO-3's first write).
  void before_micro_batch(int index, int count);
  // After backward of every micro-batch: whatever the hooks did not reduce.
  void sync_gradients();
  void optimizer_step();
  // After the optimizer: ZeRO-1/2's all-gather of the updated shards.
  void sync_params();
  // Adds to `out` what this rank's model state differs from the model's own ledger (which
  // counts the full weights and gradients): optimizer state, shards and gathered layers,
  // minus the full buffers a stage frees; `model_grads`: gradient buffers the model keeps
  // besides the store's (expert-parallel partials), freed from stage 2 on as well.
  void add_model_state(model::MemoryLedger& out, int64_t model_grads = 0) const;
  // After the last step: this rank's parameters in its local layout (fp32); under ZeRO-3
  // only the owned elements are real (see owned_ranges()), the rest are zero.
  std::vector<float> final_params() const;

  // Checkpoints (checkpoint::StateAccess): the optimizers' runs (ZeRO 0: the whole buffer,
  // saved by rank 0 of each part's group; ZeRO 1-3: this rank's shards), the parameters, and
  // setting them before the first step.
  std::vector<checkpoint::OptimizerRun> optimizer_runs() override;
  std::vector<float> params() const override { return final_params(); }
  void load_params(std::span<const float> local) override;
  bool keeps_all_params() const override { return zero_ != 3; }
  std::span<float> fp32_params(size_t begin, size_t count) override;
  void fp32_params_loaded() override;

 private:
  class Hooks;
  struct Part {
    std::vector<model::ParamRange> ranges;
    Communicator* group = nullptr;
    size_t size = 0;
    bool contiguous = true;
    model::ParamRange mine;        // ZeRO-1/2: this rank's shard of the packed part
    std::vector<T> packed_params;  // ZeRO-1/2 of a non-contiguous part
    std::vector<T> packed_grads;   // non-contiguous parts: scratch
    model::TrackedBuffer<T> shard_grads;
    std::unique_ptr<SliceOptimizer> opt;
  };
  std::span<T> part_params(Part& p);
  void pack(const Part& p, std::span<const T> from, std::span<T> to) const;
  void unpack(const Part& p, std::span<const T> from, std::span<T> to) const;
  void all_reduce(Communicator& c, std::span<T> g);
  void bucket_done(int layer);
  void gather(int layer);
  void release(int layer);
  void reduce_scatter_layer(int layer);
  Communicator* group_of(int part) const { return part == 0 ? ctx_.dp : ctx_.expert_dp; }
  int rank_in(int part) const {
    const Communicator* g = group_of(part);
    return g ? g->rank() : 0;
  }

  DpContext ctx_;
  const int zero_;
  const bool divide_;
  std::span<T> params_, grads_;
  model::MemoryLedger ledger_;  // shards, gathered layers, optimizer state
  std::vector<Part> parts_;
  // ZeRO 0 with buckets.
  std::vector<GradBucket> buckets_;
  bool sync_now_ = true;
  // ZeRO 3.
  std::vector<Zero3Segment> segments_;
  std::vector<std::vector<int>> layer_segments_;
  std::vector<char> step_scoped_;   // per layer: holds expert segments (see Hooks)
  std::vector<char> gathered_now_;  // per layer: its segments are gathered
  model::TrackedBuffer<T> shard_params_, shard_grads_;
  std::vector<model::TrackedBuffer<T>> gathered_;
  std::vector<T> rs_part_;
  bool write_shard_ = false;
  std::unique_ptr<SliceOptimizer> opt_;  // ZeRO 0 (whole buffer) and 3 (the shard buffer)
  RankTimeline no_timeline_{nullptr};
  std::unique_ptr<Hooks> hooks_;
};

}  // namespace dtsim::train

#include "train/data_parallel/data_parallel_impl.h"
