// The shape of a device mesh: data, tensor, pipeline, expert and context parallel widths.
// Global rank g sits at (pp, dp, cp, tp) with g = ((pp_rank * dp + dp_rank) * cp + cp_rank) *
// tp + tp_rank: tensor-parallel groups are consecutive ranks (the fast, intra-node axis),
// then context parallelism, pipeline stages the slowest axis, as Megatron-LM orders them
// (tp-cp-dp-pp). Context-parallel ranks see the same samples and different tokens, so the
// data-parallel sync runs over dp x cp (dp_cp, Megatron's data-parallel-with-cp group). Expert
// parallelism does not multiply the world: the ep ranks of an expert group are ep consecutive
// data-parallel ranks (ep divides dp).
#pragma once

namespace dtsim::train {

// The axes, as placements name them (train/placement.h); ep lies inside dp.
enum class MeshAxis { kDp, kTp, kPp, kEp, kCp };
inline constexpr int kMeshAxes = 5;
inline const char* axis_name(MeshAxis axis) {
  constexpr const char* kNames[kMeshAxes] = {"dp", "tp", "pp", "ep", "cp"};
  return kNames[static_cast<int>(axis)];
}
struct MeshShape {
  int dp = 1, tp = 1, pp = 1, ep = 1, cp = 1;
  int world() const { return dp * tp * pp * cp; }
  // The data-parallel sync group: dp x cp (cp ranks hold different tokens of the same samples).
  int dp_cp() const { return dp * cp; }
  // The ranks that hold copies of the same experts (expert parallelism's data-parallel group).
  int expert_dp() const { return ep > 1 ? dp / ep : 1; }
  bool operator==(const MeshShape&) const = default;
  // The width along `axis`.
  int on(MeshAxis axis) const {
    const int w[kMeshAxes] = {dp, tp, pp, ep, cp};
    return w[static_cast<int>(axis)];
  }
};

// Whether the data-parallel groups span the axis (its ranks see different samples, so a
// gradient is partial along it until the data-parallel sync): dp, ep, which lies in dp, and
// cp, whose ranks hold different tokens.
inline bool axis_in_data_parallel(MeshAxis axis) {
  return axis == MeshAxis::kDp || axis == MeshAxis::kEp || axis == MeshAxis::kCp;
}

// A rank's position on each axis.
struct MeshCoord {
  int dp = 0, tp = 0, pp = 0, cp = 0;
  int dp_cp = 0;     // rank in the data-parallel sync group: dp * cp_width + cp
  int ep = 0;        // rank inside its expert group: dp % ep
  int ep_group = 0;  // which expert group: dp / ep
  int on(MeshAxis axis) const {
    const int c[kMeshAxes] = {dp, tp, pp, ep, cp};
    return c[static_cast<int>(axis)];
  }
};

inline MeshCoord mesh_coord(const MeshShape& s, int rank) {
  MeshCoord c;
  c.tp = rank % s.tp;
  c.cp = rank / s.tp % s.cp;
  c.dp = rank / (s.tp * s.cp) % s.dp;
  c.pp = rank / (s.tp * s.cp * s.dp);
  c.dp_cp = c.dp * s.cp + c.cp;
  c.ep = c.dp % s.ep;
  c.ep_group = c.dp / s.ep;
  return c;
}

}  // namespace dtsim::train
