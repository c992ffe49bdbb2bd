// Placements (issue 32): every tensor's placement on each mesh axis for representative
// meshes, chunks split as torch.tensor_split, ZeRO shards that tile each part once, and the
// model state they give equal to what a run measures.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "train/placement_plan.h"
#include "train_test_util.h"

namespace dtsim::train {
namespace {

using Kind = AxisPlacement::Kind;

// "param tp of block0.w1 is shard(0)", as a row of a case.
struct Expect {
  const char* tensor;
  const char* what;  // "param", "grad", "synced_grad", "optimizer"
  MeshAxis axis;
  const char* placement;
};

struct PlacementCase {
  const char* name;
  ModelKind model;
  MeshShape mesh;
  int zero;
  std::vector<Expect> expect;
};

TrainConfig config_of(const PlacementCase& k) {
  TrainConfig c =
      k.model == ModelKind::kMlp ? mlp_config(Strategy::kMesh, 1) : moe_config(Strategy::kMesh, 1);
  c.widths.dp = k.mesh.dp, c.widths.tp = k.mesh.tp, c.widths.pp = k.mesh.pp,
  c.widths.ep = k.mesh.ep, c.zero = k.zero;
  c.ranks = k.mesh.world();
  c.micro_batches = k.mesh.pp > 1 ? 4 : 1;
  if (k.model == ModelKind::kMlp) c.mlp.num_blocks = 2;
  if (k.model == ModelKind::kMoe) c.moe.num_blocks = 2;
  return c;
}

std::string placed(const TensorPlacement& t, const std::string& what, MeshAxis axis) {
  if (axis == MeshAxis::kDp && what == "grad") return t.grads_dp.str();
  if (axis == MeshAxis::kDp && what == "synced_grad") return t.synced_grads_dp.str();
  if (axis == MeshAxis::kDp && what == "optimizer") return t.state_dp.str();
  return t.on(axis).str();
}

class PlacementTest : public ::testing::TestWithParam<PlacementCase> {};

TEST_P(PlacementTest, EachTensorIsPlacedAsTheMeshSays) {
  const PlacementCase& k = GetParam();
  const ModelPlacement p(config_of(k));
  for (const Expect& e : k.expect) {
    EXPECT_EQ(placed(p.tensor(e.tensor), e.what, e.axis), e.placement)
        << e.what << " " << axis_name(e.axis) << " of " << e.tensor;
  }
}

// Every element of every tensor is held, on each (pp, tp, ep) position, by exactly the
// chunks the placements give, and the local layouts agree with them.
TEST_P(PlacementTest, ChunksTileEveryTensorOncePerReplica) {
  const PlacementCase& k = GetParam();
  const ModelPlacement p(config_of(k));
  const MeshShape& m = p.shape();
  for (const TensorPlacement& t : p.tensors()) {
    std::vector<int> covered(static_cast<size_t>(t.rows * t.cols), 0);
    for (int r = 0; r < m.world(); ++r) {
      const MeshCoord at = mesh_coord(m, r);
      if (at.dp != at.ep) continue;  // one data-parallel replica (of each expert group)
      const std::vector<TensorChunk> blocks = t.chunks(m, at);
      std::vector<const model::ParamView*> views;  // the local tensors of this name, in order
      for (const model::ParamLayout& l : p.chunks(at)) {
        for (const model::ParamView& v : l.views()) {
          if (v.name == t.name) views.push_back(&v);
        }
      }
      ASSERT_EQ(views.size(), blocks.size()) << t.name << " on rank " << r;
      for (size_t b = 0; b < blocks.size(); ++b) {
        EXPECT_EQ(views[b]->rows, blocks[b].rows) << t.name;
        EXPECT_EQ(views[b]->cols, blocks[b].cols) << t.name;
      }
      if (!p.writes(t.name, at)) continue;  // a copy replicated over tp
      if (t.on(MeshAxis::kEp).kind == Kind::kReplicate && at.ep != 0) continue;  // over ep
      for (const TensorChunk& c : blocks) {
        for (int64_t i = c.row0; i < c.row0 + c.rows; ++i) {
          for (int64_t j = c.col0; j < c.col0 + c.cols; ++j) ++covered[i * t.cols + j];
        }
      }
    }
    for (int n : covered) ASSERT_EQ(n, 1) << t.name;
  }
}

const MeshAxis kDp = MeshAxis::kDp, kTp = MeshAxis::kTp, kPp = MeshAxis::kPp, kEp = MeshAxis::kEp;

INSTANTIATE_TEST_SUITE_P(
    Meshes, PlacementTest,
    ::testing::Values(PlacementCase{"mlp_dp4_ddp",
                                    ModelKind::kMlp,
                                    {.dp = 4},
                                    0,
                                    {{"block0.w1", "param", kDp, "replicate"},
                                     {"block0.w1", "grad", kDp, "partial"},
                                     {"block0.w1", "synced_grad", kDp, "replicate"},
                                     {"block0.w1", "optimizer", kDp, "replicate"},
                                     {"head.w", "param", kTp, "replicate"}}},
                      PlacementCase{"mlp_dp4_zero1",
                                    ModelKind::kMlp,
                                    {.dp = 4},
                                    1,
                                    {{"block1.w2", "param", kDp, "replicate"},
                                     {"block1.w2", "synced_grad", kDp, "replicate"},
                                     {"block1.w2", "optimizer", kDp, "zero-shard"}}},
                      PlacementCase{"mlp_dp4_zero2",
                                    ModelKind::kMlp,
                                    {.dp = 4},
                                    2,
                                    {{"block1.w2", "param", kDp, "replicate"},
                                     {"block1.w2", "synced_grad", kDp, "zero-shard"}}},
                      PlacementCase{"mlp_dp2_zero3",
                                    ModelKind::kMlp,
                                    {.dp = 2},
                                    3,
                                    {{"block0.b1", "param", kDp, "zero-shard"},
                                     {"block0.b1", "grad", kDp, "partial"},
                                     {"block0.b1", "optimizer", kDp, "zero-shard"}}},
                      PlacementCase{"mlp_tp2_megatron",
                                    ModelKind::kMlp,
                                    {.tp = 2},
                                    0,
                                    {{"block0.w1", "param", kTp, "shard(0)"},
                                     {"block0.b1", "param", kTp, "shard(0)"},
                                     {"block0.w2", "param", kTp, "shard(1)"},
                                     {"block0.b2", "param", kTp, "replicate"},
                                     {"head.w", "param", kTp, "replicate"},
                                     {"block0.w1", "grad", kDp, "replicate"}}},
                      PlacementCase{"mlp_pp2",
                                    ModelKind::kMlp,
                                    {.pp = 2},
                                    0,
                                    {{"block0.w1", "param", kPp, "held(0)"},
                                     {"block1.w1", "param", kPp, "held(1)"},
                                     {"head.w", "param", kPp, "held(1)"}}},
                      PlacementCase{"mlp_dp2_tp2_pp2_zero1",
                                    ModelKind::kMlp,
                                    {.dp = 2, .tp = 2, .pp = 2},
                                    1,
                                    {{"block1.w2", "param", kTp, "shard(1)"},
                                     {"block1.w2", "param", kPp, "held(1)"},
                                     {"block1.w2", "optimizer", kDp, "zero-shard"}}},
                      PlacementCase{"moe_dp4_ep2_zero2",
                                    ModelKind::kMoe,
                                    {.dp = 4, .ep = 2},
                                    2,
                                    {{"moe0.expert0.w1", "param", kEp, "held(0)"},
                                     {"moe0.expert3.w1", "param", kEp, "held(1)"},
                                     {"moe0.router", "param", kEp, "replicate"},
                                     {"moe0.expert3.w1", "grad", kDp, "partial"},
                                     {"moe0.expert3.w1", "synced_grad", kDp, "zero-shard"}}},
                      PlacementCase{"moe_dp2_ep2_experts_not_sharded_over_dp",
                                    ModelKind::kMoe,
                                    {.dp = 2, .ep = 2},
                                    1,
                                    {{"moe0.expert1.b2", "param", kEp, "held(0)"},
                                     {"moe0.expert1.b2", "grad", kDp, "replicate"},
                                     {"moe0.expert1.b2", "optimizer", kDp, "replicate"},
                                     {"moe0.router", "optimizer", kDp, "zero-shard"}}},
                      PlacementCase{"moe_tp2_expert_tensor_parallel",
                                    ModelKind::kMoe,
                                    {.tp = 2},
                                    0,
                                    {{"moe1.expert2.w1", "param", kTp, "shard(0)"},
                                     {"moe1.expert2.w2", "param", kTp, "shard(1)"},
                                     {"moe1.router", "param", kTp, "replicate"}}}),
    [](const auto& info) { return std::string(info.param.name); });

// torch.tensor_split(10 rows, 4) gives 3, 3, 2, 2 rows.
TEST(Placement, UnevenShardsSplitAsTensorSplit) {
  TensorPlacement t{.name = "w", .rows = 10, .cols = 6};
  t.params[static_cast<int>(MeshAxis::kTp)] = AxisPlacement::shard(0);
  const MeshShape m{.tp = 4};
  const int64_t rows[] = {3, 3, 2, 2}, row0[] = {0, 3, 6, 8};
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(t.chunks(m, mesh_coord(m, r)), (std::vector<TensorChunk>{{row0[r], 0, rows[r], 6}}))
        << r;
  }
  t.params[static_cast<int>(MeshAxis::kTp)] = AxisPlacement::shard(1);
  EXPECT_EQ(t.chunks(m, mesh_coord(m, 3)), (std::vector<TensorChunk>{{0, 5, 10, 1}}));
}

// A fused tensor (q, k and v rows of 4 heads each) over tp 2: each block split on its own,
// the rank holding its two heads of each, as Megatron lays out a fused QKV.
TEST(Placement, FusedBlocksSplitEachBlock) {
  TensorPlacement t{.name = "qkv.w", .rows = 12, .cols = 8};
  t.params[static_cast<int>(MeshAxis::kTp)] = AxisPlacement::shard(0, 3);
  EXPECT_EQ(t.on(MeshAxis::kTp).str(), "shard(0, 3 blocks)");
  const MeshShape m{.tp = 2};
  EXPECT_EQ(t.chunks(m, mesh_coord(m, 1)),
            (std::vector<TensorChunk>{{2, 0, 2, 8}, {6, 0, 2, 8}, {10, 0, 2, 8}}));
}

// Pipeline and expert tensors are held by one coordinate only.
TEST(Placement, HeldTensorsHaveNoChunkElsewhere) {
  TensorPlacement t{.name = "moe0.expert3.w1", .rows = 16, .cols = 8};
  t.params[static_cast<int>(MeshAxis::kEp)] = AxisPlacement::held(1);
  const MeshShape m{.dp = 2, .ep = 2};
  EXPECT_TRUE(t.chunks(m, mesh_coord(m, 0)).empty());
  EXPECT_EQ(t.chunks(m, mesh_coord(m, 1)).size(), 1u);
}

// ZeRO 1-2 split each part as tensor_split (larger shards first); the shards of a dp group
// tile the rank's buffer exactly once, whatever its size.
TEST(Placement, ZeroShardsTileThePartOnce) {
  TrainConfig c = mlp_config(Strategy::kMesh, 3);
  c.widths.dp = 3, c.widths.tp = 1, c.zero = 1;
  const ModelPlacement p(c);
  const int64_t n = static_cast<int64_t>(p.full_layout().size());
  ASSERT_NE(n % 3, 0) << "the case needs an uneven split";
  int64_t total = 0;
  for (int r = 0; r < 3; ++r) {
    const StateElements e = p.elements(mesh_coord(p.shape(), r));
    EXPECT_EQ(e.params, n);
    EXPECT_EQ(e.optimizer, n / 3 + (r < n % 3 ? 1 : 0)) << "rank " << r;
    total += e.optimizer;
  }
  EXPECT_EQ(total, n);
  EXPECT_EQ(p.elements(mesh_coord(p.shape(), 2), true).optimizer, n / 3 + 1) << "the largest";
}

// The model state the placements give each rank is what the run measures, category by
// category (ZeRO 0-2: no gathered layers; the run's optimizer and master are its shards).
struct MeasuredCase {
  const char* name;
  ModelKind model;
  MeshShape mesh;
  int zero;
};

class PlacementMeasured : public ::testing::TestWithParam<MeasuredCase> {};

TEST_P(PlacementMeasured, ModelStateEqualsTheRunsPerRank) {
  const MeasuredCase& k = GetParam();
  TrainConfig c = config_of({k.name, k.model, k.mesh, k.zero, {}});
  c = with_adam(c);
  c.precision = model::Precision::kMixedBf16;
  c.steps = 1;
  const ModelPlacement p(c);
  const RunResult run = run_training(c);
  ASSERT_EQ(run.ranks.size(), static_cast<size_t>(p.shape().world()));
  for (int r = 0; r < p.shape().world(); ++r) {
    const auto want = state_bytes(p.elements(mesh_coord(p.shape(), r)), c.precision, c.optimizer);
    for (model::MemoryCategory cat :
         {model::MemoryCategory::kWeights, model::MemoryCategory::kMasterWeights,
          model::MemoryCategory::kAdamM, model::MemoryCategory::kAdamV}) {
      const int i = static_cast<int>(cat);
      EXPECT_EQ(run.ranks[r].memory[i], want[i]) << "rank " << r << " category " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Meshes, PlacementMeasured,
    ::testing::Values(MeasuredCase{"mlp_dp2_tp2_zero1", ModelKind::kMlp, {.dp = 2, .tp = 2}, 1},
                      MeasuredCase{"mlp_dp3_zero2_uneven", ModelKind::kMlp, {.dp = 3}, 2},
                      MeasuredCase{"mlp_dp2_pp2_zero1", ModelKind::kMlp, {.dp = 2, .pp = 2}, 1},
                      MeasuredCase{"moe_dp4_ep2_zero1", ModelKind::kMoe, {.dp = 4, .ep = 2}, 1}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace dtsim::train
