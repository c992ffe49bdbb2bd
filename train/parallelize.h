// The model on one rank of the mesh: the plain model's layers, each given this rank's shard
// (torchtitan's parallelize_module as one function), as the config's ModelSpec lays them out
// (train/models/); whatever the layout, the data-parallel placement of the rank's buffer
// (which tensors have copies on which ranks) comes from rank_dp_parts.
//
// Thread safety: pure functions of their arguments.
#pragma once

#include "model/layer.h"
#include "model/param_layout.h"
#include "train/config.h"
#include "train/data_parallel/data_parallel.h"
#include "train/mesh_shape.h"
#include "train/models/model_spec.h"

namespace dtsim::train {

// All of the model's layers (pipeline layers of every chunk) as rank `at` of `shape` holds them.
model::Layers rank_layers(const TrainConfig& config, const MeshShape& shape, const MeshCoord& at,
                          RankComms comms = {});
// Whether the rank's first layer reads the Trainee's input in place (expert parallelism's
// embedding does, so the stack need not copy it).
bool rank_copies_input(const TrainConfig& config, const MeshShape& shape);
// The dense and expert parts of a buffer laid out as `local` on a rank of `shape`: under
// expert parallelism (ep > 1) the experts sync over expert_dp, the rest over dp.
DpParts rank_dp_parts(const TrainConfig& config, const MeshShape& shape,
                      const model::ParamLayout& local);
// The ZeRO stage a config runs (the zero1-3 presets, else --zero).
int zero_stage(const TrainConfig& config);

}  // namespace dtsim::train
