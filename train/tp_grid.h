// The (dp, tp) grid of tensor-parallel training: tp = tp_size consecutive ranks, dp = the
// ranks with the same position in every TP group (dp_tp.cc).
#pragma once

#include <memory>
#include <optional>

#include "runtime/communicator.h"
#include "train/config.h"
#include "train/result.h"

namespace dtsim::train {

// Tensor-parallel training of config.mlp on config.ranks ranks as config.ranks / tp_size
// data-parallel replicas of tp_size-wide TP groups (tensor_parallel.cc); run_tp passes
// tp_size = ranks, run_dp_tp config.tp_size.
std::optional<RunResult> run_tp_grid(const TrainConfig& config, int tp_size);

// A rank's two groups on the (dp, tp) grid. With one replica, tp is the world and dp is null.
struct TpGrid {
  std::unique_ptr<Communicator> tp_owned, dp_owned;
  Communicator* tp = nullptr;
  Communicator* dp = nullptr;
  int dp_index = 0;  // which replica (which slice of the global batch) this rank serves
};
TpGrid make_tp_grid(Communicator& world, int tp_size);

}  // namespace dtsim::train
