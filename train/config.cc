#include "train/config.h"

#include <array>
#include <utility>

namespace dtsim::train {
namespace {

constexpr std::array<std::pair<Strategy, const char*>, 9> kStrategyNames{{
    {Strategy::kSingle, "single"},
    {Strategy::kAccum, "accum"},
    {Strategy::kDdp, "ddp"},
    {Strategy::kZero1, "zero1"},
    {Strategy::kZero2, "zero2"},
    {Strategy::kZero3, "zero3"},
    {Strategy::kTp, "tp"},
    {Strategy::kEp, "ep"},
    {Strategy::kDpTp, "dp-tp"},
}};

}  // namespace

model::ParamLayout model_layout(const TrainConfig& config) {
  return config.model == ModelKind::kMlp ? model::mlp_layout(config.mlp)
                                         : model::moe_model_layout(config.moe);
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

const char* to_string(ModelKind m) { return m == ModelKind::kMlp ? "mlp" : "moe"; }

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
