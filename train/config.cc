#include "train/config.h"

#include <array>
#include <utility>

#include "train/models/model_spec.h"

namespace dtsim::train {
namespace {

constexpr std::array<std::pair<Strategy, const char*>, 10> kStrategyNames{{
    {Strategy::kSingle, "single"},
    {Strategy::kAccum, "accum"},
    {Strategy::kDdp, "ddp"},
    {Strategy::kZero1, "zero1"},
    {Strategy::kZero2, "zero2"},
    {Strategy::kZero3, "zero3"},
    {Strategy::kTp, "tp"},
    {Strategy::kEp, "ep"},
    {Strategy::kDpTp, "dp-tp"},
    {Strategy::kMesh, "mesh"},
}};

}  // namespace

model::ParamLayout model_layout(const TrainConfig& config) {
  return model_spec(config).layout(config);
}

MeshShape TrainConfig::mesh() const {
  switch (strategy) {
    case Strategy::kSingle:
    case Strategy::kAccum:
      return {};
    case Strategy::kDdp:
    case Strategy::kZero1:
    case Strategy::kZero2:
    case Strategy::kZero3:
      return {.dp = ranks, .tp = 1, .pp = 1, .ep = 1};
    case Strategy::kTp:
      return {.dp = 1, .tp = ranks, .pp = 1, .ep = 1};
    case Strategy::kDpTp:
      return {.dp = ranks / widths.tp, .tp = widths.tp, .pp = 1, .ep = 1};
    case Strategy::kEp:
      return {.dp = ranks, .tp = 1, .pp = 1, .ep = ranks};
    case Strategy::kMesh:
      break;
  }
  return widths;
}

pipeline::ScheduleSpec schedule_spec(const TrainConfig& c) {
  return {.kind = c.schedule,
          .stages = c.widths.pp,
          .micro_batches = c.micro_batches,
          .virtual_stages = c.virtual_stages};
}

void resolve_preset(TrainConfig& c) {
  // Only meshes of dp, tp and ep are presets.
  const MeshShape flat{.dp = c.widths.dp, .tp = c.widths.tp, .ep = c.widths.ep};
  if (c.strategy != Strategy::kMesh || !(c.widths == flat) ||
      c.widths.dp * c.widths.tp != c.ranks) {
    return;
  }
  const bool experts = model_spec(c).experts(c) > 0;
  if (c.widths.tp == 1 && c.widths.ep == 1) {
    if (c.zero > 0 && c.widths.dp == 1) return;  // nothing to shard: validate() says so
    constexpr Strategy kByStage[] = {Strategy::kDdp, Strategy::kZero1, Strategy::kZero2,
                                     Strategy::kZero3};
    if (c.zero >= 0 && c.zero <= 3) c.strategy = kByStage[c.zero];
    c.preset_from_mesh = true;
  } else if (c.zero == 0 && c.widths.ep == 1 && !experts) {
    c.strategy = c.widths.dp == 1 ? Strategy::kTp : Strategy::kDpTp;
    c.preset_from_mesh = true;
  } else if (c.zero == 0 && c.widths.tp == 1 && experts && c.widths.ep == c.widths.dp) {
    c.strategy = Strategy::kEp;
    c.preset_from_mesh = true;
  }
}

bool data_parallel(Strategy s) {
  return s == Strategy::kDdp || s == Strategy::kZero1 || s == Strategy::kZero2 ||
         s == Strategy::kZero3;
}

const char* to_string(Strategy s) {
  for (const auto& [strategy, name] : kStrategyNames) {
    if (strategy == s) return name;
  }
  return "unknown";
}

const char* to_string(ModelKind m) { return model_spec(m).name(); }

bool parse_strategy(const std::string& s, Strategy* out) {
  for (const auto& [strategy, name] : kStrategyNames) {
    if (s == name) {
      *out = strategy;
      return true;
    }
  }
  return false;
}

}  // namespace dtsim::train
