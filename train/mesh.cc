#include "train/mesh.h"

#include <string>

#include "runtime/types.h"

namespace dtsim::train {

Mesh::Mesh(Communicator& world, const MeshShape& s)
    : world_(world), shape_(s), coord_(mesh_coord(s, world.rank())) {
  if (world.size() != s.world() || s.ep < 1 || s.dp % s.ep != 0) {
    throw UsageError("mesh: --dp " + std::to_string(s.dp) + " x --tp " + std::to_string(s.tp) +
                     " x --pp " + std::to_string(s.pp) + " x --cp " + std::to_string(s.cp) +
                     " with --ep " + std::to_string(s.ep) + " does not fit " +
                     std::to_string(world.size()) + " ranks");
  }
  const MeshCoord& c = coord_;
  const int rank = world.rank();
  // The order of the splits is fixed (every rank makes the same ones): tp, dp, pp, ep, cp,
  // dp_cp. `tpc`: the rank's (cp, tp) position, which every group but tp's and cp's shares.
  const int tpc = c.cp * s.tp + c.tp;
  tp_ = group(s.tp, (c.pp * s.dp + c.dp) * s.cp + c.cp, rank, "tp", tp_owned_);
  dp_ = group(s.dp, c.pp * s.tp * s.cp + tpc, rank, "dp", dp_owned_);
  pp_ = group(s.pp, c.dp * s.tp * s.cp + tpc, c.pp, "pp", pp_owned_);
  const int groups = s.dp / s.ep;
  ep_ = group(s.ep, (c.pp * s.tp * s.cp + tpc) * groups + c.ep_group, rank, "ep", ep_owned_);
  if (s.ep > 1) {
    expert_dp_ =
        group(groups, (c.pp * s.tp * s.cp + tpc) * s.ep + c.ep, rank, "edp", expert_dp_owned_);
  }
  cp_ = group(s.cp, (c.pp * s.dp + c.dp) * s.tp + c.tp, rank, "cp", cp_owned_);
  if (s.cp > 1) dp_cp_ = group(s.dp_cp(), c.pp * s.tp + c.tp, c.dp_cp, "dpcp", dp_cp_owned_);
}

Communicator* Mesh::group(int size, int color, int key, const char* name,
                          std::unique_ptr<Communicator>& owned) {
  if (size == 1) return nullptr;
  if (size == world_.size()) return &world_;
  owned = world_.split(color, key, name);
  return owned.get();
}

}  // namespace dtsim::train
