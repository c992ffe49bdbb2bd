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
  bool operator==(const MeshShape&) const = default;
};

// A rank's position on each axis.
struct MeshCoord {
  int dp = 0, tp = 0, pp = 0;
  int ep = 0;        // rank inside its expert group: dp % ep
  int ep_group = 0;  // which expert group: dp / ep
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
