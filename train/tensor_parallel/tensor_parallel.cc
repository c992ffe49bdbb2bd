// Tensor parallelism (Megatron-LM, Shoeybi et al. 2019) for the MLP's residual blocks.
//
// Every rank of a T-wide tensor-parallel group sees the same samples and holds 1/T of each
// block: the first Linear is column-parallel (rank r keeps rows [r H/T, (r+1) H/T) of W1 and
// b1), GELU stays local to those H/T features, and the second Linear is row-parallel (the same
// H/T columns of W2). Forward: each rank's W2 product is a partial sum of the block output,
// and one all_reduce per block (Megatron's g operator) completes it before b2, added once,
// and the residual. Backward: the block's input gradient through the local W1 rows is a
// partial sum too, and one all_reduce per block (f's backward) completes it; block 0 skips
// it because its input is the data. So a step costs L all_reduces forward and L - 1 backward,
// each of B x D activations. b2 and the head are replicated: their gradients are computed on
// every rank from the same all-reduced activations by the same deterministic kernels, so they
// are bitwise identical and need no collective; the optimizer (elementwise) then keeps every
// replica identical, and after training the harness checks that bit for bit. Under DP x TP
// (dp_tp.cc) the group's gradients are additionally all-reduced across the data-parallel
// replicas, DDP style. Each rank holds 1/T of the block weights (and their gradients and
// optimizer state) plus the whole head.
#include <memory>
#include <string>
#include <vector>

#include "train/data_parallel/zero12_sync.h"
#include "train/grad_ops.h"
#include "train/launch.h"
#include "train/mesh.h"
#include "train/slice_optimizer.h"
#include "train/strategies.h"
#include "train/tensor_parallel/tp_mlp_block.h"
#include "train/trainee.h"

namespace dtsim::train {
namespace {

// One rank of the (dp, tp) mesh: its TP shard of the MLP, fed its replica's samples; the
// gradients are synchronised across the replicas by DDP's all-reduce or ZeRO-1/2 along dp.
template <class T>
class TpRank : public RankStrategy {
 public:
  TpRank(const TrainConfig& config, Mesh& mesh, Trainee& trainee, StepRunner& runner,
         std::span<T> params, std::span<T> grads)
      : config_(config),
        mesh_(mesh),
        trainee_(trainee),
        timeline_(runner.timeline()),
        hooks_(&runner.timeline()),
        params_(params),
        grads_(grads) {
    if (config.zero > 0 && mesh.dp() != nullptr) {
      // Gradients carry 1/B: the reduce-scatter's sum is already the global mean.
      zero_ = std::make_unique<ZeroSync<T>>(config, *mesh.dp(), runner.timeline(), config.zero,
                                            /*divide=*/false, params, grads);
    } else {
      opt_ = make_slice_optimizer(config, params, &trainee.memory());
    }
  }

  // Replica d takes data-parallel rank d's samples; gradients carry 1/B (the global mean).
  // Every rank of a TP group computes the same loss: its rank 0 reports it.
  std::vector<MicroBatch> micro_batches() const override {
    std::vector<MicroBatch> micro =
        data_parallel_micro_batches(config_, mesh_.shape().dp, mesh_.coord().dp,
                                    1.0f / static_cast<float>(config_.global_batch));
    for (MicroBatch& mb : micro) mb.reports_loss = mesh_.coord().tp == 0;
    return micro;
  }
  void begin_step() override { trainee_.store().zero_grad(); }
  float forward_backward(int step, const MicroBatch& mb) override {
    const float loss = trainee_.forward_backward(step, mb.first, mb.size, mb.grad_scale, &hooks_);
    hooks_.finish();
    return loss;
  }
  void sync_gradients() override {
    if (zero_) return zero_->sync_gradients();
    if (mesh_.dp() == nullptr) return;  // DDP across replicas: grads already carry 1/B
    TracedComm dp(*mesh_.dp(), timeline_, config_.algo);
    dp.all_reduce(grads_);
  }
  void optimizer_step() override {
    if (zero_) return zero_->optimizer_step();
    opt_->step(params_, grads_);
  }
  void sync_params() override {
    if (zero_) zero_->sync_params();
  }
  void observe_memory(PeakMemory& peak) override {
    if (zero_) return peak.observe(zero_->ledger(), trainee_.memory());
    peak.observe(trainee_.memory());
  }
  std::vector<float> final_params() override { return trainee_.store().params_as_float(); }

 private:
  const TrainConfig& config_;
  Mesh& mesh_;
  Trainee& trainee_;
  RankTimeline& timeline_;
  PhaseHooks hooks_;
  std::span<T> params_, grads_;
  std::unique_ptr<SliceOptimizer> opt_;  // without ZeRO
  std::unique_ptr<ZeroSync<T>> zero_;    // ZeRO-1/2 along dp
};

}  // namespace

std::optional<RunResult> run_tensor_parallel(const TrainConfig& config, const MeshShape& shape) {
  return launch(
      config,
      [&](Communicator& comm, StepRunner& runner) {
        Mesh mesh(comm, shape);
        // A one-rank world is its own TP group of width 1 (--strategy tp --ranks 1).
        Communicator& group = mesh.tp() != nullptr ? *mesh.tp() : comm;
        TracedComm tp(group, runner.timeline(), config.algo);
        Trainee trainee(config, tp_mlp_layers(config.mlp, mesh.coord().tp, shape.tp, &tp));
        run_rank<TpRank>(runner, trainee, config, mesh, trainee, runner);
      },
      assemble_slices(
          model::mlp_layout(config.mlp),
          [&](int rank) {
            return model::layout_of(
                tp_mlp_layers(config.mlp, mesh_coord(shape, rank).tp, shape.tp, nullptr));
          },
          "tensor parallel"));
}

std::optional<RunResult> run_tp(const TrainConfig& config) {
  return run_tensor_parallel(config, config.mesh());
}

}  // namespace dtsim::train
