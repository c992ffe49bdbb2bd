// The MLP regression model (model/mlp.h): residual GELU blocks, tensor-parallel as Megatron
// splits them (train/tensor_parallel/), MSE on a synthetic regression task.
#include <algorithm>
#include <string>

#include "model/data.h"
#include "model/mlp.h"
#include "train/models/model_spec.h"
#include "train/tensor_parallel/tp_mlp_block.h"

namespace dtsim::train {
namespace {

std::string str(int v) { return std::to_string(v); }

class RegressionObjective : public Objective {
 public:
  explicit RegressionObjective(const TrainConfig& c)
      : in_(c.mlp.input_dim),
        out_(c.mlp.output_dim),
        loss_(c.mlp.output_dim),
        task_(c.mlp.input_dim, c.mlp.output_dim, task_seed(c)) {}

  std::span<const float> load_batch(int64_t step, int first, int count) override {
    x_.resize(static_cast<size_t>(count) * in_);
    y_.resize(static_cast<size_t>(count) * out_);
    task_.batch(step, first, count, x_, y_);
    return x_;
  }
  model::Targets targets() const override { return {.values = y_, .labels = {}}; }
  model::Loss& loss() override { return loss_; }

 private:
  int in_, out_;
  model::MseLoss loss_;
  model::RegressionTask task_;
  std::vector<float> x_, y_;  // (count, D) inputs, (count, O) targets
};

class MlpSpec : public ModelSpec {
 public:
  ModelKind kind() const override { return ModelKind::kMlp; }
  const char* name() const override { return "mlp"; }

  void configure(const ModelFlags& f, TrainConfig& c) const override {
    c.mlp = {.input_dim = f.dim,
             .hidden_dim = f.hidden.value_or(64),
             .num_blocks = f.layers.value_or(2),
             .output_dim = 4};
  }
  std::string describe(const TrainConfig& c) const override {
    return "mlp D " + str(c.mlp.input_dim) + " H " + str(c.mlp.hidden_dim) + " L " +
           str(c.mlp.num_blocks);
  }
  std::vector<std::pair<std::string, double>> shape_fields(const TrainConfig& c) const override {
    return {{"dim", c.mlp.input_dim},
            {"hidden", c.mlp.hidden_dim},
            {"layers", c.mlp.num_blocks},
            {"outputs", c.mlp.output_dim}};
  }

  std::string validate(const TrainConfig& c) const override {
    if (c.mlp.hidden_dim < 1) return "--hidden " + str(c.mlp.hidden_dim) + " must be at least 1";
    if (c.mlp.num_blocks < 1) return "--layers " + str(c.mlp.num_blocks) + " must be at least 1";
    return "";
  }
  std::string validate_mesh(const TrainConfig& c, const MeshShape& m) const override {
    if (m.ep > 1) return "--ep " + str(m.ep) + " shards the MoE's experts: it needs --model moe";
    if (c.mlp.hidden_dim % m.tp != 0) {
      return "--hidden " + str(c.mlp.hidden_dim) + " is not divisible by --tp " + str(m.tp) +
             "; change --hidden or --tp";
    }
    return "";
  }

  model::ParamLayout layout(const TrainConfig& c) const override {
    return model::mlp_layout(c.mlp);
  }
  model::Layers layers(const TrainConfig& c, const MeshShape& shape, const MeshCoord& at,
                       RankComms comms) const override {
    if (shape.tp == 1) return model::mlp_layers(c.mlp, 0, c.mlp.num_blocks + 1);
    return tp_mlp_layers(c.mlp, at.tp, shape.tp, comms.tp);
  }

  int pipeline_blocks(const TrainConfig& c) const override { return c.mlp.num_blocks; }
  bool splits_backward() const override { return true; }

  // Inputs, outputs, pre-activations and a workspace per block.
  int64_t activation_floats(const TrainConfig& c, int64_t rows, int tp,
                            int layers_share) const override {
    const int64_t d = c.mlp.input_dim, h = c.mlp.hidden_dim / std::max(1, tp);
    const int64_t blocks = std::max<int64_t>(1, c.mlp.num_blocks / layers_share);
    return rows * (d + blocks * (2 * d + 3 * h) + 2 * c.mlp.output_dim);
  }

  std::unique_ptr<Objective> objective(const TrainConfig& c, model::MemoryLedger*) const override {
    return std::make_unique<RegressionObjective>(c);
  }
};

}  // namespace

const ModelSpec& mlp_model_spec() {
  static const MlpSpec spec;
  return spec;
}

}  // namespace dtsim::train
