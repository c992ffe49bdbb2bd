#include "train/models/model_spec.h"

#include <array>
#include <atomic>
#include <stdexcept>

namespace dtsim::train {

// Each model's spec, defined in its own file.
const ModelSpec& mlp_model_spec();
const ModelSpec& moe_model_spec();
const ModelSpec& gpt_model_spec();

namespace {

// The registry: one row per model.
constexpr size_t kModels = 3;
std::array<const ModelSpec*, kModels> registry() {
  return {&mlp_model_spec(), &moe_model_spec(), &gpt_model_spec()};
}

// ScopedModelSpec's replacements, by ModelKind.
std::array<std::atomic<const ModelSpec*>, kModels> overrides{};

}  // namespace

ScopedModelSpec::ScopedModelSpec(ModelKind kind, const ModelSpec& spec)
    : kind_(kind), previous_(overrides.at(static_cast<size_t>(kind)).exchange(&spec)) {}

ScopedModelSpec::~ScopedModelSpec() { overrides.at(static_cast<size_t>(kind_)).store(previous_); }

DpParts ModelSpec::dp_parts(const TrainConfig&, const MeshShape&,
                            const model::ParamLayout& local) const {
  return DpParts::whole(local);
}

const ModelSpec& model_spec(ModelKind kind) {
  if (const ModelSpec* o = overrides.at(static_cast<size_t>(kind)).load()) return *o;
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
