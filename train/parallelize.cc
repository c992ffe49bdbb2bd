#include "train/parallelize.h"

namespace dtsim::train {

model::Layers rank_layers(const TrainConfig& config, const MeshShape& shape, const MeshCoord& at,
                          RankComms comms) {
  return model_spec(config).layers(config, shape, at, comms);
}

bool rank_copies_input(const TrainConfig& config, const MeshShape& shape) {
  return model_spec(config).copies_input(config, shape);
}

int zero_stage(const TrainConfig& config) {
  switch (config.strategy) {
    case Strategy::kZero1:
      return 1;
    case Strategy::kZero2:
      return 2;
    case Strategy::kZero3:
      return 3;
    case Strategy::kDdp:
    case Strategy::kTp:
    case Strategy::kEp:
    case Strategy::kDpTp:
      return 0;
    default:
      return config.zero;
  }
}

}  // namespace dtsim::train
