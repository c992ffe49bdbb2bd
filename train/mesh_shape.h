// The shape of a device mesh: data, tensor, pipeline and expert parallel widths. Global rank
// g sits at (pp, dp, tp) with g = (pp_rank * dp + dp_rank) * tp + tp_rank: tensor-parallel
// groups are consecutive ranks (the fast, intra-node axis), pipeline stages the slowest axis,
// as Megatron-LM orders them. Expert parallelism does not multiply the world: the ep ranks
// of an expert group are ep consecutive data-parallel ranks (ep divides dp).
#pragma once

namespace dtsim::train {

struct MeshShape {
  int dp = 1, tp = 1, pp = 1, ep = 1;
  int world() const { return dp * tp * pp; }
  // The ranks that hold copies of the same experts (expert parallelism's data-parallel group).
  int expert_dp() const { return ep > 1 ? dp / ep : 1; }
  bool operator==(const MeshShape&) const = default;
};

// The axes, as placements name them (train/placement.h); ep lies inside dp.
enum class MeshAxis { kDp, kTp, kPp, kEp };
inline constexpr int kMeshAxes = 4;
inline const char* axis_name(MeshAxis axis) {
  constexpr const char* kNames[kMeshAxes] = {"dp", "tp", "pp", "ep"};
  return kNames[static_cast<int>(axis)];
}
// Whether the data-parallel groups span the axis (its ranks see different samples, so a
// gradient is partial along it until the data-parallel sync): dp and ep, which lies in dp.
inline bool axis_in_data_parallel(MeshAxis axis) {
  return axis == MeshAxis::kDp || axis == MeshAxis::kEp;
}

// A rank's position on each axis.
struct MeshCoord {
  int dp = 0, tp = 0, pp = 0;
  int ep = 0;        // rank inside its expert group: dp % ep
  int ep_group = 0;  // which expert group: dp / ep
  int on(MeshAxis axis) const {
    const int c[kMeshAxes] = {dp, tp, pp, ep};
    return c[static_cast<int>(axis)];
  }
};

inline MeshCoord mesh_coord(const MeshShape& s, int rank) {
  MeshCoord c;
  c.tp = rank % s.tp;
  c.dp = rank / s.tp % s.dp;
  c.pp = rank / (s.tp * s.dp);
  c.ep = c.dp % s.ep;
  c.ep_group = c.dp / s.ep;
  return c;
}

}  // namespace dtsim::train
