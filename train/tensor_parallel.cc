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

#include "model/data.h"
#include "train/grad_ops.h"
#include "train/launch.h"
#include "train/slice_optimizer.h"
#include "train/strategies.h"
#include "train/tp_mlp.h"
#include "train/trainee.h"

namespace dtsim::train {
namespace {

// Assembles the full parameter vector from the shards of replica 0 and checks that every
// rank's copy of every element (replicated head and b2, and every DP replica) is identical.
std::vector<float> gather_params(const TrainConfig& config, int tp_size,
                                 const std::vector<std::vector<float>>& local) {
  std::vector<float> full(model::mlp_layout(config.mlp).size());
  std::vector<std::vector<ParamSlice>> slices(tp_size);
  for (int t = 0; t < tp_size; ++t) {
    slices[t] = tp_mlp_slices(config.mlp, t, tp_size);
    for (const ParamSlice& s : slices[t]) {
      std::copy_n(local[t].begin() + s.local, s.count, full.begin() + s.full);
    }
  }
  for (size_t rank = 0; rank < local.size(); ++rank) {
    for (const ParamSlice& s : slices[rank % tp_size]) {
      if (!std::equal(full.begin() + s.full, full.begin() + s.full + s.count,
                      local[rank].begin() + s.local)) {
        throw Error("tensor parallel: rank " + std::to_string(rank) +
                    "'s copy of a replicated parameter diverged from rank " +
                    std::to_string(rank % tp_size) + "'s (full offset " + std::to_string(s.full) +
                    "); replicated gradients must be identical on every rank");
      }
    }
  }
  return full;
}

// One rank of the (dp, tp) grid: its TP shard of the MLP, fed its replica's samples.
template <class T>
class TpRank : public RankStrategy {
 public:
  TpRank(const TrainConfig& config, const TpGrid& grid, TpMlp& model, StepRunner& runner,
         std::span<T> params, std::span<T> grads)
      : config_(config),
        grid_(grid),
        model_(model),
        timeline_(runner.timeline()),
        tp_(*grid.tp, runner.timeline(), config.algo),
        task_(config.mlp.input_dim, config.mlp.output_dim, task_seed(config)),
        params_(params),
        grads_(grads),
        opt_(make_slice_optimizer(config, params, &model.memory())) {}

  // Replica d takes data-parallel rank d's samples; gradients carry 1/B (the global mean).
  // Every rank of a TP group computes the same loss: its rank 0 reports it.
  std::vector<MicroBatch> micro_batches() const override {
    const int dp_size = config_.ranks / grid_.tp->size();
    std::vector<MicroBatch> micro = data_parallel_micro_batches(
        config_, dp_size, grid_.dp_index, 1.0f / static_cast<float>(config_.global_batch));
    for (MicroBatch& mb : micro) mb.reports_loss = grid_.tp->rank() == 0;
    return micro;
  }
  void begin_step() override { model_.store().zero_grad(); }
  float forward_backward(int step, const MicroBatch& mb) override {
    x_.resize(size_t(mb.size) * config_.mlp.input_dim);
    y_.resize(size_t(mb.size) * config_.mlp.output_dim);
    task_.batch(step, mb.first, mb.size, x_, y_);
    return model_.forward_backward(x_, y_, mb.size, mb.grad_scale, tp_);
  }
  void sync_gradients() override {
    if (grid_.dp == nullptr) return;  // DDP across replicas: grads already carry 1/B
    TracedComm dp(*grid_.dp, timeline_, config_.algo);
    dp.all_reduce(grads_);
  }
  void optimizer_step() override { opt_->step(params_, grads_); }
  void observe_memory(PeakMemory& peak) override { peak.observe(model_.memory()); }
  std::vector<float> final_params() override { return model_.store().params_as_float(); }

 private:
  const TrainConfig& config_;
  const TpGrid& grid_;
  TpMlp& model_;
  RankTimeline& timeline_;
  TracedComm tp_;
  const model::RegressionTask task_;
  std::vector<float> x_, y_;
  std::span<T> params_, grads_;
  std::unique_ptr<SliceOptimizer> opt_;
};

}  // namespace

std::optional<RunResult> run_tp_grid(const TrainConfig& config, int tp_size) {
  const std::vector<float> init =
      model::init_params(model::mlp_layout(config.mlp), config.seed);  // MlpModel's bits
  return launch(
      config,
      [&](Communicator& comm, StepRunner& runner) {
        const TpGrid grid = make_tp_grid(comm, tp_size);
        TpMlp model(config.mlp, grid.tp->rank(), tp_size, config.precision);
        model.load_full(init);
        with_buffers(model.store(), [&](auto params, auto grads) {
          using T = typename decltype(grads)::value_type;
          TpRank<T> rank(config, grid, model, runner, params, grads);
          runner.run(rank);
        });
      },
      [&](std::vector<std::vector<float>>& parts) {
        return gather_params(config, tp_size, parts);
      });
}

std::optional<RunResult> run_tp(const TrainConfig& config) {
  return run_tp_grid(config, config.ranks);
}

}  // namespace dtsim::train
