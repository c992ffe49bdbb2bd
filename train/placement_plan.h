// ModelPlacement: one description of where every parameter, gradient and optimizer state of a
// run lies on its mesh (train/placement.h says what each placement means), built once from
// the model's spec (its full layout and each rank's layers), the MeshShape and the ZeRO
// stage. The memory plan, the JSON report, estimate and checkpoints read it; the data-
// parallel wrapper takes its ZeRO ownership from the same functions (placement.h).
//
// Building checks that each rank's layers lay out what the placement says: a tensor split
// over tp must be the torch.tensor_split chunk of the rank's coordinate, a pipeline or
// expert tensor must have exactly one holder; else std::logic_error names the tensor, the
// rank and the expected chunk (a wrong shard offset is caught here, before any work).
//
// Thread safety: immutable after construction; every const method may be called from any
// thread.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "model/memory.h"
#include "model/param_layout.h"
#include "train/config.h"
#include "train/mesh_shape.h"
#include "train/placement.h"

namespace dtsim::train {

// A block of a global tensor: rows [row0, row0 + rows) x columns [col0, col0 + cols).
struct TensorChunk {
  int64_t row0 = 0, col0 = 0, rows = 0, cols = 0;
  bool operator==(const TensorChunk&) const = default;
};

struct TensorPlacement {
  std::string name;
  int64_t rows = 0, cols = 0;  // global shape (a vector: cols 1)
  bool vector = false;         // shape [rows]
  bool expert = false;         // syncs over expert_dp (the experts under expert parallelism)
  // The parameter's placement by MeshAxis; gradients and optimizer state share its tp, pp
  // and ep placements and differ on dp only.
  std::array<AxisPlacement, kMeshAxes> params{};
  AxisPlacement grads_dp{};         // after backward: partial (one summand per replica)
  AxisPlacement synced_grads_dp{};  // after the sync: replicate, or zero-shard (ZeRO 2-3)
  AxisPlacement state_dp{};         // optimizer state and fp32 master: zero-shard from ZeRO 1

  const AxisPlacement& on(MeshAxis a) const { return params[static_cast<int>(a)]; }
  // The blocks of the parameter that rank `at` of `shape` holds before ZeRO shards it
  // (tensor_split of the global shape, or of each of its blocks, along a shard's dim), in
  // the order its layout lays them out (one local tensor each); empty if it holds none.
  std::vector<TensorChunk> chunks(const MeshShape& shape, const MeshCoord& at) const;
};

// Elements of model state one rank holds under its ZeRO stage.
struct StateElements {
  int64_t params = 0;     // parameters of its layout (tp, pp and ep applied; ZeRO not)
  int64_t weights = 0;    // resident weights: params, or ZeRO-3's padded shard
  int64_t grads = 0;      // gradients: params, or ZeRO 2-3's shard
  int64_t optimizer = 0;  // elements with optimizer state (and an fp32 master copy)
  int64_t gathered = 0;   // ZeRO-3: the largest layer, gathered in full while it runs
};

// Bytes by model::MemoryCategory of `e` (activations 0): weights and gradients in the run's
// precision, an fp32 master under mixed precision, Adam's m and v or SGD's momentum.
std::array<int64_t, model::kNumMemoryCategories> state_bytes(const StateElements& e,
                                                             model::Precision precision,
                                                             model::OptimizerKind optimizer);

class ModelPlacement {
 public:
  // The placements of `config`'s model on config.mesh() with its ZeRO stage (single and
  // accumulation: one rank).
  explicit ModelPlacement(const TrainConfig& config);

  const MeshShape& shape() const { return shape_; }
  int zero() const { return zero_; }
  const model::ParamLayout& full_layout() const { return full_; }
  // In the full layout's order.
  const std::vector<TensorPlacement>& tensors() const { return tensors_; }
  // The tensor called `name`; throws std::logic_error if there is none.
  const TensorPlacement& tensor(const std::string& name) const;

  // The local layouts of the pipeline chunks rank `at` holds (one without a pipeline).
  const std::vector<model::ParamLayout>& chunks(const MeshCoord& at) const;
  // For each of those chunks, the runs of its buffer that sync over the data-parallel group
  // (dp x cp) and those that sync over expert_dp: what the rank's data-parallel wrappers take.
  const std::vector<DpParts>& dp_parts(const MeshCoord& at) const;
  // Whether `at` saves its copy of `name` in a checkpoint: on every axis where the tensor is
  // replicated, coordinate 0 writes, but on the data-parallel axes (dp, ep), where the
  // wrapper's optimizer runs name the writer (the ZeRO owner, or data-parallel rank 0).
  bool writes(const std::string& name, const MeshCoord& at) const;

  // Rank `at`'s model state. largest_shards: every ZeRO shard taken as the largest of its
  // group (tensor_split puts the larger shards first), for a bound over the ranks.
  StateElements elements(const MeshCoord& at, bool largest_shards = false) const;
  // ZeRO-3: the runs of rank `rank`'s stage buffer (its chunks one after another) that it
  // owns; empty below stage 3.
  std::vector<model::ParamRange> zero3_held(int rank) const;

 private:
  struct Position {
    std::vector<model::ParamLayout> chunks;
    std::vector<DpParts> parts;
  };
  const Position& position(const MeshCoord& at) const;
  void place(const Position& p, const MeshCoord& at, std::vector<std::vector<int>>& stages,
             std::vector<std::vector<int>>& eps);
  int group(int part) const { return part == 0 ? shape_.dp_cp() : shape_.expert_dp(); }

  MeshShape shape_;
  int zero_ = 0;
  model::ParamLayout full_;
  std::vector<TensorPlacement> tensors_;
  std::map<std::string, int> index_;
  std::vector<Position> positions_;  // by (pp, tp, ep)
};

}  // namespace dtsim::train
