// The MoE classifier (model/moe_model.h): an embedding, L top-k MoE layers and a head;
// experts sharded over expert-parallel groups (train/expert_parallel/), each expert's
// hidden width split by tensor parallelism (model::ExpertSharding); cross-entropy on a
// synthetic classification task.
#include <algorithm>
#include <string>

#include "model/data.h"
#include "model/moe_model.h"
#include "train/expert_parallel/ep_moe_layer.h"
#include "train/models/model_spec.h"

namespace dtsim::train {
namespace {

std::string str(int v) { return std::to_string(v); }

class ClassificationObjective : public Objective {
 public:
  ClassificationObjective(const TrainConfig& c, model::MemoryLedger* ledger)
      : in_(c.moe.input_dim),
        loss_(c.moe.num_classes, ledger),
        task_(c.moe.input_dim, c.moe.num_classes, task_seed(c)) {}

  std::span<const float> load_batch(int64_t step, int first, int count) override {
    x_.resize(static_cast<size_t>(count) * in_);
    labels_.resize(count);
    task_.batch(step, first, count, x_, labels_);
    return x_;
  }
  model::Targets targets() const override { return {.values = {}, .labels = labels_}; }
  model::Loss& loss() override { return loss_; }

 private:
  int in_;
  model::CrossEntropyLoss loss_;
  model::ClassificationTask task_;
  std::vector<float> x_;         // (count, D_in) inputs
  std::vector<int32_t> labels_;  // (count) class labels
};

class MoeSpec : public ModelSpec {
 public:
  ModelKind kind() const override { return ModelKind::kMoe; }
  const char* name() const override { return "moe"; }
  std::vector<std::string> own_flags() const override { return {"--experts", "--top-k"}; }

  void configure(const ModelFlags& f, TrainConfig& c) const override {
    c.moe.input_dim = f.dim;
    c.moe.num_classes = 4;
    c.moe.moe.d_model = f.dim;
    c.moe.moe.d_ff = f.hidden.value_or(32);
    c.moe.moe.num_experts = f.experts;
    c.moe.moe.top_k = f.top_k;
    c.moe.num_blocks = f.layers.value_or(1);
  }
  std::string describe(const TrainConfig& c) const override {
    const model::MoeConfig& m = c.moe.moe;
    return "moe D " + str(m.d_model) + " F " + str(m.d_ff) + " E " + str(m.num_experts) + " top-" +
           str(m.top_k) + (c.moe.num_blocks > 1 ? " L " + str(c.moe.num_blocks) : "");
  }
  std::vector<std::pair<std::string, double>> shape_fields(const TrainConfig& c) const override {
    const model::MoeConfig& m = c.moe.moe;
    return {{"dim", m.d_model},
            {"input_dim", c.moe.input_dim},
            {"hidden", m.d_ff},
            {"experts", m.num_experts},
            {"top_k", m.top_k},
            {"classes", c.moe.num_classes},
            {"capacity_factor", m.capacity_factor},
            {"layers", c.moe.num_blocks}};
  }

  std::string validate(const TrainConfig& c) const override {
    const model::MoeConfig& m = c.moe.moe;
    if (m.num_experts < 1) return "--experts " + str(m.num_experts) + " must be at least 1";
    if (m.top_k < 1) return "--top-k " + str(m.top_k) + " must be at least 1";
    if (m.top_k > m.num_experts) {
      return "--top-k " + str(m.top_k) + " exceeds --experts " + str(m.num_experts) +
             ": each token picks distinct experts; lower --top-k or raise --experts";
    }
    if (m.d_ff < 1) return "--hidden " + str(m.d_ff) + " must be at least 1";
    if (c.moe.num_blocks < 1) return "--layers " + str(c.moe.num_blocks) + " must be at least 1";
    return "";
  }
  std::string validate_mesh(const TrainConfig& c, const MeshShape& m) const override {
    if (m.ep > 1) {
      if (m.dp % m.ep != 0) {
        return "--ep " + str(m.ep) + " does not divide --dp " + str(m.dp) +
               ": experts are sharded over groups of --ep data-parallel ranks; give --dp " +
               str(m.ep) + " or a multiple of it";
      }
      if (c.moe.moe.num_experts % m.ep != 0) {
        return "--experts " + str(c.moe.moe.num_experts) + " is not divisible by --ep " +
               str(m.ep) + ": every rank of an expert group holds the same number of experts";
      }
    }
    if (c.moe.moe.d_ff % m.tp != 0) {
      return "--hidden " + str(c.moe.moe.d_ff) + " is not divisible by --tp " + str(m.tp) +
             " (each expert's hidden width is split); change --hidden or --tp";
    }
    return "";
  }
  int experts(const TrainConfig& c) const override { return c.moe.moe.num_experts; }

  model::ParamLayout layout(const TrainConfig& c) const override {
    return model::moe_model_layout(c.moe);
  }
  model::Layers layers(const TrainConfig& c, const MeshShape& shape, const MeshCoord& at,
                       RankComms comms) const override {
    // tp > 1: Megatron's expert tensor parallelism, each expert's hidden width split.
    model::ExpertSharding sharding;
    if (shape.tp > 1) {
      sharding = {.rank = at.tp, .size = shape.tp, .reduce = [tp = comms.tp](std::span<float> x) {
                    if (tp != nullptr) tp->all_reduce(x);
                  }};
    }
    if (shape.ep == 1) return model::moe_model_layers(c.moe, sharding);
    return ep_moe_model_layers(c.moe, at.ep, shape.ep, comms.ep, {c.precision, c.micro_batches},
                               sharding);
  }
  // Expert parallelism's embedding reads the input in place.
  bool copies_input(const TrainConfig&, const MeshShape& shape) const override {
    return shape.ep == 1;
  }
  // Under expert parallelism the experts sync over expert_dp, the rest over dp.
  DpParts dp_parts(const TrainConfig& c, const MeshShape& shape,
                   const model::ParamLayout& local) const override {
    if (shape.ep == 1) return DpParts::whole(local);
    EpParamSplit split = ep_param_split(local, c.moe.moe);
    return {std::move(split.replicated), std::move(split.experts)};
  }

  int pipeline_blocks(const TrainConfig& c) const override { return c.moe.num_blocks; }
  int lead_layers() const override { return 1; }          // the embedding
  bool splits_backward() const override { return true; }  // zb-h1
  bool batch_coupled() const override { return true; }

  // Routed rows travel out and back in forward and backward (the exchange's send and
  // receive buffers) and keep the experts' hidden rows; twice that bounds capacity padding
  // and the per-source copies of expert parallelism.
  int64_t activation_floats(const TrainConfig& c, int64_t rows, int,
                            int layers_share) const override {
    const model::MoeConfig& m = c.moe.moe;
    const int64_t blocks = std::max<int64_t>(1, c.moe.num_blocks / layers_share);
    const int64_t routed = rows * m.top_k;
    return rows * (c.moe.input_dim + 2 * m.d_model + 2 * c.moe.num_classes) +
           2 * blocks *
               (rows * (4 * m.d_model + 2 * m.num_experts) + routed * (6 * m.d_model + 4 * m.d_ff));
  }

  std::unique_ptr<Objective> objective(const TrainConfig& c,
                                       model::MemoryLedger* ledger) const override {
    return std::make_unique<ClassificationObjective>(c, ledger);
  }
};

}  // namespace

const ModelSpec& moe_model_spec() {
  static const MoeSpec spec;
  return spec;
}

}  // namespace dtsim::train
