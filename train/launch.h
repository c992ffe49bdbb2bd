// Where every multi-rank training run starts: make_world() creates its World (the one place
// that decides the process model), and launch() runs a rank job on it and brings every rank's
// outcome to global rank 0 through collectives, where the RunResult is built. A process that
// does not hold global rank 0 gets no RunResult and prints nothing.
//
// Thread safety: call from one (non-rank) thread; the job runs on every rank thread.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/param_layout.h"
#include "runtime/world.h"
#include "train/config.h"
#include "train/grad_ops.h"
#include "train/result.h"
#include "train/step_runner.h"
#include "train/trainee.h"

namespace dtsim::train {

// The World of config.ranks ranks that a training run of `config` runs on.
std::unique_ptr<World> make_world(const TrainConfig& config);

// Whether this process holds global rank 0 of the worlds make_world() creates, so that it
// alone prints and writes files (always true with every rank a thread of this process).
bool holds_global_rank0();

// One rank's part of a run: build the strategy around `world` and run it with `runner`.
using RankJob = std::function<void(Communicator& world, StepRunner& runner)>;
// On global rank 0: the full fp32 parameter vector from every rank's final_params(), in rank
// order; may throw Error when the parts disagree (replicas that diverged).
using AssembleParams = std::function<std::vector<float>(std::vector<std::vector<float>>& parts)>;

// Runs `job` on every rank of make_world(config) with `loss_slots` loss slots per rank;
// returns the RunResult in the process of global rank 0, nothing elsewhere.
std::optional<RunResult> launch(const TrainConfig& config, const RankJob& job,
                                const AssembleParams& assemble, int loss_slots = 1);

// The result of a single-rank run (run_single, run_accum) from its runner's outcome.
RunResult solo_result(const TrainConfig& config, RankOutcome outcome);

// Rank 0's part of the parameters, for strategies whose rank 0 holds all of them.
std::vector<float> params_of_rank0(std::vector<std::vector<float>>& parts);

// Runs the strategy Rank<T>(args..., params, grads) with `runner`, T the storage type of
// `trainee`'s parameters (float, or BFloat16 under mixed precision): what every strategy's
// rank job ends with. The trainee's gradients are the runner's to poison (add_gradients).
template <template <class> class Rank, class... Args>
void run_rank(StepRunner& runner, Trainee& trainee, Args&&... args) {
  with_buffers(trainee.store(), [&](auto params, auto grads) {
    using T = typename decltype(grads)::value_type;
    runner.add_gradients(grads);
    Rank<T> rank(args..., params, grads);
    runner.run(rank);
  });
}

// A strategy whose every rank trains a whole replica and whose rank 0 ends with all the
// parameters (ddp, zero1, zero2): Rank<T>(config, world, trainee, runner, params, grads).
template <template <class> class Rank>
std::optional<RunResult> launch_replicated(const TrainConfig& config) {
  return launch(
      config,
      [&](Communicator& world, StepRunner& runner) {
        Trainee trainee(config);
        run_rank<Rank>(runner, trainee, config, world, trainee, runner);
      },
      params_of_rank0);
}

// Rank r's parameter layout (model::slices_into places its tensors in the full layout).
using LocalLayout = std::function<model::ParamLayout(int rank)>;
// The ranges of rank r's local layout whose values it holds (ZeRO-3: its shards); an empty
// function, or an empty list from it... is "all of them" only for the empty function.
using HeldRanges = std::function<std::vector<model::ParamRange>(int rank)>;
// For strategies whose ranks hold slices of the model (tensor, expert parallel): puts every
// rank's part into the `full` layout; an element that several ranks hold (a replicated
// tensor, a data-parallel copy) must be bitwise equal on all of them, else the assembly
// throws Error naming `strategy`, the ranks and the tensor. With `held`, only the ranges it
// names of each rank's part are read (the rest of the part is ignored).
AssembleParams assemble_slices(model::ParamLayout full, LocalLayout local, std::string strategy,
                               HeldRanges held = {});

}  // namespace dtsim::train
