// The model on one rank of the mesh: the plain model's layers, each given this rank's shard
// (torchtitan's parallelize_module as one function), as the config's ModelSpec lays them out
// (train/models/). Which runs of a rank's buffer have copies on which ranks (its data-parallel
// parts) is the placement's to say: ModelPlacement::dp_parts (placement_plan.h).
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
// The ZeRO stage a config runs (the zero1-3 presets, else --zero).
int zero_stage(const TrainConfig& config);

}  // namespace dtsim::train
