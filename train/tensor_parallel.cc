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
#include <chrono>
#include <string>
#include <vector>

#include "model/data.h"
#include "runtime/world.h"
#include "train/grad_ops.h"
#include "train/intra_op.h"
#include "train/run_frame.h"
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

}  // namespace

RunResult run_tp_grid(const TrainConfig& config, int tp_size) {
  const int n = config.ranks, dp_size = n / tp_size;
  const MicroBatches micro(config, dp_size);  // replica r takes data-parallel rank r's samples
  const float scale = 1.0f / static_cast<float>(config.global_batch);
  const int D = config.mlp.input_dim, O = config.mlp.output_dim;
  const std::vector<float> init =
      model::init_params(model::mlp_layout(config.mlp), config.seed);  // MlpModel's bits

  RunFrame frame(config, dp_size);
  std::vector<std::vector<float>> local(n);
  IntraOpLimit intra_op(n);
  World world(n);
  world.run([&](Communicator& comm) {
    const int rank = comm.rank();
    RankFrame me(frame, config, rank);
    TpGrid grid = make_tp_grid(comm, tp_size);
    TracedComm tp(*grid.tp, me.timeline(), config.algo);
    TpMlp model(config.mlp, grid.tp->rank(), tp_size, config.precision);
    model.load_full(init);
    const model::RegressionTask task(D, O, task_seed(config));
    std::vector<float> x(size_t(micro.size) * D), y(size_t(micro.size) * O);
    with_buffers(model.store(), [&](auto params, auto grads) {
      auto opt = make_slice_optimizer(config, params, &model.memory());
      for (int step = 0; step < config.steps; ++step) {
        const auto start = std::chrono::steady_clock::now();
        model.store().zero_grad();
        for (int m = 0; m < micro.count; ++m) {
          task.batch(step, micro.first(grid.dp_index, m), micro.size, x, y);
          const float loss = model.forward_backward(x, y, micro.size, scale, tp);
          if (grid.tp->rank() == 0) frame.board.add(step, grid.dp_index, loss, micro.size);
        }
        if (grid.dp != nullptr) {  // DDP across replicas: grads already carry 1/B
          TracedComm dp(*grid.dp, me.timeline(), config.algo);
          dp.all_reduce(grads);
        }
        me.timeline().phase("optimizer", [&] { opt->step(params, grads); });
        me.peak().observe(model.memory());
        me.end_step(start);
      }
    });
    local[rank] = model.store().params_as_float();
    me.finish();
  });
  frame.params = gather_params(config, tp_size, local);
  return collect(frame, world, config);
}

RunResult run_tp(const TrainConfig& config) { return run_tp_grid(config, config.ranks); }

}  // namespace dtsim::train
