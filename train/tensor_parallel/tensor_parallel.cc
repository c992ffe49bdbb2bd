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
#include <utility>
#include <vector>

#include "train/data_parallel/zero12_sync.h"
#include "train/data_parallel/zero3_hooks.h"
#include "train/data_parallel/zero3_shard.h"
#include "train/grad_ops.h"
#include "train/launch.h"
#include "train/mesh.h"
#include "train/mesh_rank.h"
#include "train/slice_optimizer.h"
#include "train/strategies.h"
#include "train/tensor_parallel/tp_mlp_block.h"
#include "train/trainee.h"

namespace dtsim::train {
namespace {

// One rank of the (dp, tp) mesh: its TP shard of the MLP, fed its replica's samples; the
// gradients are synchronised across the replicas by DDP's all-reduce or ZeRO-1/2 along dp.
template <class T>
class TpRank : public MeshRank<T> {
  using Base = MeshRank<T>;
  using Base::config_, Base::mesh_, Base::trainee_, Base::timeline_, Base::params_, Base::grads_;

 public:
  TpRank(const TrainConfig& config, Mesh& mesh, Trainee& trainee, StepRunner& runner,
         std::span<T> params, std::span<T> grads)
      : Base(config, mesh, trainee, runner, params, grads) {
    if (config.zero == 3 && mesh.dp() != nullptr) {
      // ZeRO-3 along dp (zero.cc's stage 3 on the rank's tensor-parallel slice): every layer
      // of the slice sharded over the dp group, gathered around each use, its gradients
      // reduce-scattered after its backward; they carry 1/B, so nothing is divided.
      zero3_layout_ = std::make_unique<Zero3Layout>(trainee.store().layout(), mesh.dp()->size());
      zero3_ = std::make_unique<Zero3Shard<T>>(config, *mesh.dp(), trainee, runner, *zero3_layout_,
                                               params, grads);
    } else if (config.zero > 0 && mesh.dp() != nullptr) {
      // Gradients carry 1/B: the reduce-scatter's sum is already the global mean.
      zero_ = std::make_unique<ZeroSync<T>>(config, *mesh.dp(), runner.timeline(), config.zero,
                                            /*divide=*/false, params, grads);
    } else {
      opt_ = make_slice_optimizer(config, params, &trainee.memory());
    }
  }

  // Every rank of a TP group computes the same loss: its rank 0 reports it.
  std::vector<MicroBatch> micro_batches() const override {
    std::vector<MicroBatch> micro = Base::micro_batches();
    for (MicroBatch& mb : micro) mb.reports_loss = mesh_.coord().tp == 0;
    if (zero3_) return Zero3Shard<T>::micro_batches(std::move(micro));
    return micro;
  }
  void before_micro_batch(int index) override {
    if (zero3_) zero3_->before_micro_batch(index);
  }
  float forward_backward(int step, const MicroBatch& mb) override {
    if (zero3_) return run_micro_batch(this->trainee_, step, mb, zero3_->hooks());
    return Base::forward_backward(step, mb);
  }
  void sync_gradients() override {
    if (zero3_) return;  // the hooks reduce-scattered every layer
    if (zero_) return zero_->sync_gradients();
    if (mesh_.dp() == nullptr) return;  // DDP across replicas: grads already carry 1/B
    TracedComm dp(*mesh_.dp(), timeline_, config_.algo);
    dp.all_reduce(grads_);
  }
  void optimizer_step() override {
    if (zero3_) return zero3_->optimizer_step();
    if (zero_) return zero_->optimizer_step();
    opt_->step(params_, grads_);
  }
  void sync_params() override {
    if (zero_) zero_->sync_params();
  }
  void observe_memory(PeakMemory& peak) override {
    if (zero3_) return zero3_->observe_memory(peak, trainee_.memory());
    if (zero_) return peak.observe(zero_->ledger(), trainee_.memory());
    peak.observe(trainee_.memory());
  }
  // Under ZeRO-3 the rank's shard of its slice, widened (assembled by run_tensor_parallel).
  std::vector<float> final_params() override {
    return zero3_ ? zero3_->final_params() : Base::final_params();
  }

 private:
  std::unique_ptr<SliceOptimizer> opt_;  // without ZeRO
  std::unique_ptr<ZeroSync<T>> zero_;    // ZeRO-1/2 along dp
  // ZeRO-3 along dp: the layout of the slice's shards, and the rank's shard of its slice.
  std::unique_ptr<Zero3Layout> zero3_layout_;
  std::unique_ptr<Zero3Shard<T>> zero3_;
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
      [&](std::vector<std::vector<float>>& parts) {
        auto local = [&](int rank) {
          return model::layout_of(
              tp_mlp_layers(config.mlp, mesh_coord(shape, rank).tp, shape.tp, nullptr));
        };
        if (config.zero == 3 && shape.dp > 1) {  // each rank's shard into its slice first
          std::vector<std::vector<float>> slices(parts.size());
          for (size_t r = 0; r < parts.size(); ++r) {
            const MeshCoord c = mesh_coord(shape, static_cast<int>(r));
            const model::ParamLayout l = local(static_cast<int>(r));
            const Zero3Layout z(l, shape.dp);
            const int first = static_cast<int>(r) - c.dp * shape.tp;  // dp rank 0 of this tp
            slices[r].assign(l.size(), 0.0f);
            for (int d = 0; d < shape.dp; ++d) {
              z.put_shard(d, std::span<const float>(parts[first + d * shape.tp]), slices[r]);
            }
          }
          parts = std::move(slices);
        }
        return assemble_slices(model::mlp_layout(config.mlp), local, "tensor parallel")(parts);
      });
}

std::optional<RunResult> run_tp(const TrainConfig& config) {
  return run_tensor_parallel(config, config.mesh());
}

}  // namespace dtsim::train
