#include "train/parallelize.h"

#include "model/mlp.h"
#include "model/moe_model.h"
#include "train/expert_parallel/ep_moe_layer.h"
#include "train/tensor_parallel/tp_mlp_block.h"

namespace dtsim::train {

model::Layers rank_layers(const TrainConfig& config, const MeshShape& shape, const MeshCoord& at,
                          RankComms comms) {
  if (config.model == ModelKind::kMoe) {
    // tp > 1: Megatron's expert tensor parallelism, each expert's hidden width split.
    model::ExpertSharding sharding;
    if (shape.tp > 1) {
      sharding = {.rank = at.tp, .size = shape.tp, .reduce = [tp = comms.tp](std::span<float> x) {
                    if (tp != nullptr) tp->all_reduce(x);
                  }};
    }
    if (shape.ep == 1) return model::moe_model_layers(config.moe, sharding);
    return ep_moe_model_layers(config.moe, at.ep, shape.ep, comms.ep,
                               {config.precision, config.micro_batches}, sharding);
  }
  if (shape.tp == 1) return model::mlp_layers(config.mlp, 0, config.mlp.num_blocks + 1);
  return tp_mlp_layers(config.mlp, at.tp, shape.tp, comms.tp);
}

bool rank_copies_input(const TrainConfig& config, const MeshShape& shape) {
  return !(config.model == ModelKind::kMoe && shape.ep > 1);
}

DpParts rank_dp_parts(const TrainConfig& config, const MeshShape& shape,
                      const model::ParamLayout& local) {
  if (config.model != ModelKind::kMoe || shape.ep == 1) return DpParts::whole(local);
  EpParamSplit split = ep_param_split(local, config.moe.moe);
  return {std::move(split.replicated), std::move(split.experts)};
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
