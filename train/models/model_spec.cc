#include "train/models/model_spec.h"

#include <array>
#include <stdexcept>

namespace dtsim::train {

// Each model's spec, defined in its own file.
const ModelSpec& mlp_model_spec();
const ModelSpec& moe_model_spec();
const ModelSpec& gpt_model_spec();

namespace {

// The registry: one row per model.
std::array<const ModelSpec*, 3> registry() {
  return {&mlp_model_spec(), &moe_model_spec(), &gpt_model_spec()};
}

}  // namespace

DpParts ModelSpec::dp_parts(const TrainConfig&, const MeshShape&,
                            const model::ParamLayout& local) const {
  return DpParts::whole(local);
}

const ModelSpec& model_spec(ModelKind kind) {
  for (const ModelSpec* spec : registry()) {
    if (spec->kind() == kind) return *spec;
  }
  throw std::logic_error("model_spec: a ModelKind without a registered spec");
}

const ModelSpec* find_model_spec(const std::string& name) {
  for (const ModelSpec* spec : registry()) {
    if (name == spec->name()) return spec;
  }
  return nullptr;
}

std::vector<const ModelSpec*> model_specs() {
  const auto all = registry();
  return {all.begin(), all.end()};
}

}  // namespace dtsim::train
