// Expert parallelism for the MoE classifier (GShard, Lepikhin et al. 2020; Switch
// Transformer, Fedus et al. 2021).
//
// The E experts are sharded over the N ranks (rank r owns experts [r E/N, (r+1) E/N)); the
// embedding, the router and the head are replicated. Each rank takes its own B/N samples
// (data parallel over the token batch), embeds them and routes its own tokens with its copy of
// the router (top-k, then capacity ceil(factor * T_local * k / E) over the tokens routed
// together on that rank). Forward: an all_to_all of the per-expert row counts gives every rank
// the split sizes, one all_to_all_single sends each token to the rank of its expert, the
// experts run where they live, a second all_to_all_single brings the outputs back, the token
// order is restored and the gate-weighted sum (plus the residual) is taken. Backward mirrors
// it with two all_to_all_singles (output gradients out, input gradients back); the router,
// gate and aux-loss backward stay local. Each expert's gradient is complete on its owner (it
// saw every rank's tokens); the replicated embed, head and router gradients differ per rank
// and are summed by one all_reduce, packed into one buffer (embed, head, router). Gradients
// carry the replica's mean (1/(B/dp)) and the sums are divided by dp, as DDP does. A step
// costs 5 all_to_alls (counts, 2 forward, 2 backward) per micro-batch and 1 all_reduce.
//
// Routing (which tokens share a capacity budget and an aux loss) depends on the batch a rank
// routes, so the single-rank reference is run_accum with the same ranks and micro-batches:
// it routes exactly the same per-rank micro-batches, one at a time. The experts run on each
// source rank's rows apart and keep each source's gradient apart until the step's end
// (EpMoeBlock), so that every float operation is the reference's, in its order: with
// dp = ep under --algo deterministic (ZeRO-0/1/2 alike) ep is bitwise equal to that
// accumulation. With dp > ep an expert's groups meet in two levels (summed within each
// expert group, then all-reduced across the groups holding it): within tolerance.
#include <memory>
#include <string>
#include <vector>

#include "train/expert_parallel/ep_moe_layer.h"
#include "train/expert_parallel/ep_zero.h"
#include "train/grad_ops.h"
#include "train/launch.h"
#include "train/mesh.h"
#include "train/mesh_rank.h"
#include "train/slice_optimizer.h"
#include "train/strategies.h"
#include "train/trainee.h"

namespace dtsim::train {
namespace {

// One expert-parallel rank: its experts and the replicated rest, fed its B/N samples.
template <class T>
class EpRank : public MeshRank<T> {
  using Base = MeshRank<T>;
  using Base::config_, Base::mesh_, Base::trainee_, Base::timeline_, Base::params_, Base::grads_;

 public:
  EpRank(const TrainConfig& config, Mesh& mesh, Trainee& trainee, StepRunner& runner,
         std::span<T> params, std::span<T> grads)
      : Base(config, mesh, trainee, runner, params, grads),
        opt_(config.zero == 0 ? make_slice_optimizer(config, params, &trainee.memory()) : nullptr) {
    // The replicated tensors: embed, head, routers, packed in that order for one all_reduce.
    const EpParamSplit split = ep_param_split(trainee.store().layout(), config.moe.moe);
    replicated_ = split.replicated;
    experts_ = split.experts;
    size_t n = 0;
    for (const model::ParamRange& r : replicated_) n += r.size();
    packed_.resize(n);
    if (config.zero > 0) {  // ep_zero.h: replicated tensors over dp, experts over expert_dp
      zero_.reserve(2);
      const int dp = mesh.shape().dp;
      zero_.emplace_back(config, dp_group(), replicated_, params, &trainee.memory(), dp);
      zero_.emplace_back(config, mesh.expert_dp(), experts_, params, &trainee.memory(), dp);
    }
  }

  // The data-parallel group of the replicated tensors (a one-rank world: the world).
  Communicator* dp_group() { return mesh_.dp() != nullptr ? mesh_.dp() : &mesh_.world(); }

  // Replica d takes data-parallel rank d's samples with the mean over them (1/(B/dp)), and
  // the summed gradients are divided by dp: accumulation's float operations (reference.cc).
  std::vector<MicroBatch> micro_batches() const override {
    return data_parallel_micro_batches(config_, mesh_.shape().dp, mesh_.coord().dp);
  }

  // Each expert's gradient is first completed from its expert group's sources, in source
  // order (EpMoeBlock::finish_gradients). The replicated embed, head and router saw
  // different tokens on every data-parallel rank and are summed over dp; each expert's
  // gradient over the groups that hold the same experts (dp > ep); then all is divided by dp.
  void sync_gradients() override {
    finish_expert_gradients(trainee_.stack());
    if (!zero_.empty()) {
      for (EpZeroPart<T>& part : zero_) part.sync_gradients(grads_, timeline_);
      return;
    }
    // A one-rank world all-reduces over itself, as every other width does.
    Communicator* group = dp_group();
    if (group->size() != mesh_.shape().dp) return;
    size_t at = 0;
    for (const model::ParamRange& r : replicated_) {
      std::copy(grads_.begin() + r.begin, grads_.begin() + r.end, packed_.begin() + at);
      at += r.size();
    }
    TracedComm dp(*group, timeline_, config_.algo);
    dp.all_reduce(std::span<T>(packed_));
    at = 0;
    for (const model::ParamRange& r : replicated_) {
      std::copy_n(packed_.begin() + at, r.size(), grads_.begin() + r.begin);
      at += r.size();
    }
    if (mesh_.expert_dp() != nullptr) {
      TracedComm edp(*mesh_.expert_dp(), timeline_, config_.algo);
      for (const model::ParamRange& r : experts_) edp.all_reduce(grads_.subspan(r.begin, r.size()));
    }
    if (mesh_.shape().dp > 1) divide(grads_, mesh_.shape().dp);
  }
  void optimizer_step() override {
    if (opt_) return opt_->step(params_, grads_);
    for (EpZeroPart<T>& part : zero_) part.optimizer_step();
  }
  void sync_params() override {
    for (EpZeroPart<T>& part : zero_) part.sync_params(params_, timeline_);
  }
  void observe_memory(PeakMemory& peak) override {
    if (config_.zero != 2) return peak.observe(trainee_.memory());
    // ZeRO-2 holds its shards' summed gradients, not the full buffer nor the experts'
    // per-source partials the micro-batches accumulate into (as zero2 counts it).
    model::MemoryLedger state;
    for (int c = 0; c < model::kNumMemoryCategories; ++c) {
      const auto cat = static_cast<model::MemoryCategory>(c);
      state.add(cat, trainee_.memory().bytes(cat));
    }
    for (const EpZeroPart<T>& part : zero_) {
      state.add(model::MemoryCategory::kGradients,
                -static_cast<int64_t>((part.size() - part.shard_size()) * sizeof(T)));
    }
    state.add(model::MemoryCategory::kGradients, -expert_partial_bytes(trainee_.stack()));
    peak.observe(state, trainee_.memory());
  }

 private:
  std::unique_ptr<SliceOptimizer> opt_;
  std::vector<model::ParamRange> replicated_;
  std::vector<model::ParamRange> experts_;  // per MoE layer: this rank's experts' gradients
  std::vector<T> packed_;            // the replicated gradients, contiguous for one all_reduce
  std::vector<EpZeroPart<T>> zero_;  // --zero 1, 2: the replicated part, the experts' part
};

}  // namespace

std::optional<RunResult> run_expert_parallel(const TrainConfig& config, const MeshShape& shape) {
  return launch(
      config,
      [&](Communicator& comm, StepRunner& runner) {
        Mesh mesh(comm, shape);
        // A one-rank world is its own expert group of width 1.
        Communicator& group = mesh.ep() != nullptr ? *mesh.ep() : comm;
        TracedComm ep(group, runner.timeline(), config.algo);
        // The embedding reads the Trainee's input buffer in place (no copy).
        Trainee trainee(config,
                        ep_moe_model_layers(config.moe, mesh.coord().ep, shape.ep, &ep,
                                            {config.precision, config.micro_batches}),
                        /*copy_input=*/false);
        run_rank<EpRank>(runner, trainee, config, mesh, trainee, runner);
      },
      assemble_slices(
          model::moe_model_layout(config.moe),
          [&](int rank) {
            return model::layout_of(
                ep_moe_model_layers(config.moe, mesh_coord(shape, rank).ep, shape.ep, nullptr, {}));
          },
          "expert parallel"));
}

std::optional<RunResult> run_ep(const TrainConfig& config) {
  return run_expert_parallel(config, config.mesh());
}

}  // namespace dtsim::train
