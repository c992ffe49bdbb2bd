// ModelSpec: everything train/ knows of one model kind (its layout, its layers on a rank of
// the mesh, where pipeline stages may cut it, its loss and synthetic task, its flags and
// what they must satisfy, its activation bound), so that strategies, validation, the check,
// the memory plan and the CLI never switch on the kind. A new model is one ModelSpec
// implementation plus a row in model_spec.cc's registry (and its ModelKind value).
//
// Thread safety: specs are immutable singletons; every method is const and may be called
// from any thread. An Objective belongs to one rank thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "model/layer.h"
#include "model/layer_stack.h"
#include "model/memory.h"
#include "model/param_layout.h"
#include "train/config.h"
#include "train/data_parallel/data_parallel.h"
#include "train/mesh_shape.h"
#include "train/traced_comm.h"

namespace dtsim::train {

// The groups a rank's layers talk on (null: for the layout only).
struct RankComms {
  TracedComm* tp = nullptr;
  TracedComm* ep = nullptr;
  TracedComm* cp = nullptr;
};

// A model's loss on the stack's output and its synthetic task on one rank: sample i of step
// s is a function of (task seed, s, i), so each rank generates exactly its own slice.
class Objective {
 public:
  virtual ~Objective() = default;
  // Samples [first, first + count) of step `step`: their inputs (count, in_dim), valid until
  // the next call; targets() then holds their targets.
  virtual std::span<const float> load_batch(int64_t step, int first, int count) = 0;
  virtual model::Targets targets() const = 0;
  virtual model::Loss& loss() = 0;
};

// The model-shape flags the CLI reads; a spec takes those it owns (unset: its defaults).
struct ModelFlags {
  int dim = 16;
  std::optional<int> hidden;
  std::optional<int> layers;
  int experts = 4;
  int top_k = 2;
  int heads = 2;                // gpt: attention heads
  std::optional<int> head_dim;  // gpt: [default: dim / heads]
  int seq = 12;                 // gpt: sequence length S (the task's 2n tokens)
  int vocab = 9;                // gpt: V, the separator and V - 1 symbols
};

class ModelSpec {
 public:
  virtual ~ModelSpec() = default;

  virtual ModelKind kind() const = 0;
  // The --model name ("mlp", "moe").
  virtual const char* name() const = 0;
  // The flags that only this model reads besides --dim --hidden --layers ("--experts").
  virtual std::vector<std::string> own_flags() const { return {}; }
  // Fills the model's part of `config` from the flags.
  virtual void configure(const ModelFlags& flags, TrainConfig& config) const = 0;
  // "mlp D 16 H 64 L 2": the shape in the run's header.
  virtual std::string describe(const TrainConfig& config) const = 0;
  // The shape's fields for the JSON report, in order (integers stay integral).
  virtual std::vector<std::pair<std::string, double>> shape_fields(
      const TrainConfig& config) const = 0;

  // "" or why the model's own flags are wrong (one line naming the flag and the fix).
  virtual std::string validate(const TrainConfig& config) const = 0;
  // "" or why this model cannot lie on `shape` (tp not dividing a width, ep without experts).
  virtual std::string validate_mesh(const TrainConfig& config, const MeshShape& shape) const = 0;
  // Experts per MoE layer, 0 for a model without experts (expert parallelism needs them).
  virtual int experts(const TrainConfig&) const { return 0; }

  // The full single-rank parameter layout.
  virtual model::ParamLayout layout(const TrainConfig& config) const = 0;
  // All layers (every pipeline chunk's) as rank `at` of `shape` holds them: the plain layers
  // given this rank's tensor and expert shards (identity at width 1).
  virtual model::Layers layers(const TrainConfig& config, const MeshShape& shape,
                               const MeshCoord& at, RankComms comms) const = 0;
  // Whether the stack copies the input (false when the first layer reads it in place).
  virtual bool copies_input(const TrainConfig&, const MeshShape&) const { return true; }
  // The data-parallel parts of a rank's buffer laid out as `local` (default: one dense part).
  virtual DpParts dp_parts(const TrainConfig& config, const MeshShape& shape,
                           const model::ParamLayout& local) const;

  // Pipeline stages cut the model's blocks: how many there are, and how many layers precede
  // the first (an embedding kept with chunk 0); the last chunk also takes the head.
  virtual int pipeline_blocks(const TrainConfig& config) const = 0;
  virtual int lead_layers() const { return 0; }
  // Layers per block, and layers after the last block (the head; a final norm with it).
  virtual int layers_per_block() const { return 1; }
  virtual int tail_layers() const { return 1; }
  // Whether every layer splits its backward into input and weight gradients (zb-h1).
  virtual bool splits_backward() const { return false; }
  // Whether a sample is a sequence of tokens that --sequence-parallel and --cp can shard.
  virtual bool has_sequence() const { return false; }

  // Whether a sample's loss depends on the other samples of its micro-batch (MoE capacity):
  // the check's reference must then group samples as the run does (accumulation).
  virtual bool batch_coupled() const { return false; }

  // A bound on the floats of activations one micro-batch of `rows` samples keeps on a rank
  // holding 1/tp of each layer's width and 1/layers_share of the blocks.
  virtual int64_t activation_floats(const TrainConfig& config, int64_t rows, int tp,
                                    int layers_share) const = 0;

  // What the trained full parameters (single-rank layout) do on held-out samples beside
  // what the initial ones did, one line for the run's summary ("" when the model has none).
  virtual std::string evaluate(const TrainConfig&, std::span<const float> /*params*/) const {
    return "";
  }

  // The loss and task of a rank (activations recorded in `ledger`).
  virtual std::unique_ptr<Objective> objective(const TrainConfig& config,
                                               model::MemoryLedger* ledger) const = 0;
  // The loss and task of rank `at` of `shape`: its tokens of each sample under context
  // parallelism (only a model that takes --cp overrides it); objective() otherwise.
  virtual std::unique_ptr<Objective> rank_objective(const TrainConfig& config,
                                                    model::MemoryLedger* ledger,
                                                    const MeshShape& /*shape*/,
                                                    const MeshCoord& /*at*/) const {
    return objective(config, ledger);
  }
};

// The spec of `kind` (every ModelKind has one).
const ModelSpec& model_spec(ModelKind kind);
inline const ModelSpec& model_spec(const TrainConfig& config) { return model_spec(config.model); }
// The spec named `name`, or null.
const ModelSpec* find_model_spec(const std::string& name);
// Every registered model, in registration order.
std::vector<const ModelSpec*> model_specs();

// For tests that plant a bug in a model's layout (a wrong shard): while alive, model_spec(
// kind) returns `spec` instead of the registered one. Create and destroy it while no run
// is in flight; reads from rank threads are safe in between.
class ScopedModelSpec {
 public:
  ScopedModelSpec(ModelKind kind, const ModelSpec& spec);
  ~ScopedModelSpec();
  ScopedModelSpec(const ScopedModelSpec&) = delete;
  ScopedModelSpec& operator=(const ScopedModelSpec&) = delete;

 private:
  ModelKind kind_;
  const ModelSpec* previous_;
};

// The seed of the synthetic task, derived from the config's seed (distinct from the model's).
inline uint64_t task_seed(const TrainConfig& config) { return config.seed * 7919 + 17; }

}  // namespace dtsim::train
