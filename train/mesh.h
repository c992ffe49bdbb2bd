// Mesh: one rank's communicators on the device mesh (picotron's grid, Megatron's parallel
// state), built with Communicator::split from a MeshShape (mesh_shape.h):
//
//   tp()         the tensor-parallel group: tp consecutive ranks with the same (pp, dp, cp)
//   dp()         the data-parallel group: the ranks with the same (pp, cp, tp), by dp rank
//   pp()         the pipeline group: the ranks with the same (dp, cp, tp), ordered by stage
//   cp()         the context-parallel ring: the ranks with the same (pp, dp, tp), by cp rank
//   dp_cp()      the gradient sync group: the ranks with the same (pp, tp), by dp * cp + cp
//                rank (dp() itself when cp is 1)
//   ep()         the expert group: ep consecutive dp ranks (same pp, tp), ordered by dp rank
//   expert_dp()  the ranks that hold the same experts: same (pp, tp, ep rank), one per
//                expert group (gradient sync of the experts)
//
// A group that is the whole world is the world communicator itself, and an axis of size 1
// has no group (null), so a mesh with one non-trivial axis costs no split at all.
//
// Thread safety: construction is collective over `world`; a Mesh belongs to one rank thread.
#pragma once

#include <memory>

#include "runtime/communicator.h"
#include "train/mesh_shape.h"

namespace dtsim::train {

class Mesh {
 public:
  // Collective over `world` (every rank calls it with the same shape); world.size() must be
  // shape.world() and shape.ep must divide shape.dp.
  Mesh(Communicator& world, const MeshShape& shape);
  Mesh(const Mesh&) = delete;
  Mesh& operator=(const Mesh&) = delete;

  const MeshShape& shape() const { return shape_; }
  const MeshCoord& coord() const { return coord_; }
  Communicator& world() { return world_; }
  Communicator* tp() { return tp_; }
  Communicator* dp() { return dp_; }
  Communicator* pp() { return pp_; }
  Communicator* ep() { return ep_; }
  Communicator* cp() { return cp_; }
  Communicator* dp_cp() { return shape_.cp > 1 ? dp_cp_ : dp_; }
  Communicator* expert_dp() { return expert_dp_; }

 private:
  // The group of the ranks sharing `color`, ordered by `key`; the world if it has `size`
  // ranks, null if 1.
  Communicator* group(int size, int color, int key, const char* name,
                      std::unique_ptr<Communicator>& owned);

  Communicator& world_;
  MeshShape shape_;
  MeshCoord coord_;
  std::unique_ptr<Communicator> tp_owned_, dp_owned_, pp_owned_, ep_owned_, expert_dp_owned_,
      cp_owned_, dp_cp_owned_;
  Communicator *tp_ = nullptr, *dp_ = nullptr, *pp_ = nullptr, *ep_ = nullptr,
               *expert_dp_ = nullptr, *cp_ = nullptr, *dp_cp_ = nullptr;
};

}  // namespace dtsim::train
