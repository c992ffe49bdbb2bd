// The device mesh: the groups Mesh builds with split, every mesh combination without a
// pipeline (dp x tp with ZeRO-1/2, dp x ep with ep < dp) against its single-rank reference
// by train/check.h's rules at N = 1, 2, 3, 4, 8, 16, presets given as mesh flags running the
// preset bit for bit, and invalid meshes refused with one line naming the flags.
#include <gtest/gtest.h>

#include <iostream>
#include <string>
#include <vector>

#include "model/moe.h"
#include "model/moe_model.h"
#include "model/param_layout.h"
#include "runtime/world.h"
#include "train/mesh.h"
#include "train/strategies.h"
#include "train/tensor_parallel/tp_mlp_block.h"
#include "train/trainee.h"
#include "train_test_util.h"

namespace dtsim::train {
namespace {

TEST(MeshGroups, TpIsFastestPpSlowestAndExpertGroupsSplitTheDataAxis) {
  const MeshShape s{.dp = 4, .tp = 2, .pp = 2, .ep = 2};  // 16 ranks
  const int N = s.world();
  std::vector<std::vector<int>> tp(N), dp(N), pp(N), ep(N), edp(N);
  World world(N);
  world.run([&](Communicator& comm) {
    Mesh mesh(comm, s);
    const int r = comm.rank();
    tp[r] = mesh.tp()->ranks();
    dp[r] = mesh.dp()->ranks();
    pp[r] = mesh.pp()->ranks();
    ep[r] = mesh.ep()->ranks();
    edp[r] = mesh.expert_dp()->ranks();
  });
  for (int r = 0; r < N; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const MeshCoord c = mesh_coord(s, r);
    EXPECT_EQ(r, (c.pp * s.dp + c.dp) * s.tp + c.tp);
    const int base = r - c.tp;
    EXPECT_EQ(tp[r], (std::vector<int>{base, base + 1}));
    const int row = c.pp * s.dp * s.tp + c.tp;
    EXPECT_EQ(dp[r], (std::vector<int>{row, row + 2, row + 4, row + 6}));
    EXPECT_EQ(pp[r], (std::vector<int>{r % 8, r % 8 + 8}));  // ordered by stage
    const int first = row + c.ep_group * s.ep * s.tp;
    EXPECT_EQ(ep[r], (std::vector<int>{first, first + 2}));
    const int mine = row + c.ep * s.tp;
    EXPECT_EQ(edp[r], (std::vector<int>{mine, mine + 4}));
  }
}

TEST(MeshGroups, AnAxisThatIsTheWholeWorldIsTheWorldAndASizeOneAxisHasNoGroup) {
  World world(4);
  world.run([&](Communicator& comm) {
    Mesh mesh(comm, {.dp = 4, .tp = 1, .pp = 1, .ep = 1});
    EXPECT_EQ(mesh.dp(), &comm);
    EXPECT_EQ(mesh.tp(), nullptr);
    EXPECT_EQ(mesh.pp(), nullptr);
    EXPECT_EQ(mesh.ep(), nullptr);
  });
}

struct MeshCase {
  int dp, tp, ep, zero, micro;
  bool moe, adam;
};

std::string case_name(const MeshCase& c) {
  std::string s =
      "N" + std::to_string(c.dp * c.tp) + (c.moe ? "_moe" : "_mlp") + "_dp" + std::to_string(c.dp);
  if (c.tp > 1) s += "_tp" + std::to_string(c.tp);
  if (c.ep > 1) s += "_ep" + std::to_string(c.ep);
  if (c.zero > 0) s += "_zero" + std::to_string(c.zero);
  if (c.micro > 1) s += "_micro" + std::to_string(c.micro);
  if (c.adam) s += "_adam";
  return s;
}

TrainConfig mesh_config(const MeshCase& m) {
  TrainConfig c =
      m.moe ? moe_config(Strategy::kMesh, m.dp * m.tp) : mlp_config(Strategy::kMesh, m.dp * m.tp);
  c.widths.dp = m.dp;
  c.widths.tp = m.tp;
  c.widths.ep = m.ep;
  c.zero = m.zero;
  c.micro_batches = m.micro;
  c.moe.moe.num_experts = 12;  // divisible by every ep below
  c.global_batch = 48;
  return m.adam ? with_adam(c) : c;
}

class MeshTraining : public ::testing::TestWithParam<MeshCase> {};

TEST_P(MeshTraining, MatchesItsSingleRankReference) {
  const MeshCase m = GetParam();
  const TrainConfig c = mesh_config(m);
  RunResult run;
  const CheckResult r = run_and_check(c, &run);  // train/check.h's rules
  std::cout << "[" << case_name(m) << "] " << r << "\n";
  EXPECT_EQ(r.reference_name, m.moe ? "accum" : "single");
  EXPECT_TRUE(r.passed) << r;
  // Per step, from the runtime's counters: ZeRO's reduce-scatter along dp; TP's 2L - 1
  // all_reduces per micro-batch; EP's 5 all_to_alls per micro-batch and its gradient
  // all_reduces (replicated tensors over dp, experts over the groups holding them).
  const double steps = c.steps;
  for (size_t rank = 0; rank < run.ranks.size(); ++rank) {
    const RankCounters& k = run.ranks[rank].counters;
    SCOPED_TRACE("rank " + std::to_string(rank));
    // Under --ep, ZeRO reduce-scatters the replicated tensors over dp and, when dp > ep,
    // the experts over the ranks holding them.
    const bool ep_experts_shared = m.moe && m.ep > 1 && m.dp > m.ep;
    // ZeRO-3 (with tp) reduce-scatters every layer after each micro-batch's backward.
    const int layers = c.mlp.num_blocks + 1;
    if (m.zero > 0 && m.dp > 1 && !(m.moe && m.zero == 3)) {
      EXPECT_EQ(k[OpKind::kReduceScatter].calls / steps, m.zero == 3         ? layers * m.micro
                                                         : ep_experts_shared ? 2
                                                                             : 1);
    }
    // An MoE layer's experts under tp: g forward and f's backward (the MoE layer always
    // computes its input gradient); an MLP: 2L - 1 per micro-batch.
    const int per_micro = m.moe ? 2 * c.moe.num_blocks : 2 * c.mlp.num_blocks - 1;
    const double tp_calls = m.tp > 1 ? per_micro * m.micro : 0;
    const double dp_calls = m.moe && m.ep > 1 ? (m.zero > 0    ? 0
                                                 : m.dp > m.ep ? 2
                                                               : 1)
                                              : (m.zero == 0 && m.dp > 1 ? 1 : 0);
    if (m.tp > 1 || (m.moe && m.ep > 1)) {
      EXPECT_EQ(k[OpKind::kAllReduce].calls / steps, tp_calls + dp_calls);
    }
    if (m.moe && m.ep > 1) {
      EXPECT_EQ(k[OpKind::kAllToAll].calls / steps, 5 * m.micro);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Combinations, MeshTraining,
    ::testing::Values(MeshCase{1, 1, 1, 0, 1, false, false},  // N = 1
                      MeshCase{1, 2, 1, 0, 1, false, false},  // N = 2
                      MeshCase{2, 1, 1, 1, 1, false, false}, MeshCase{2, 1, 2, 0, 1, true, false},
                      MeshCase{3, 1, 1, 2, 1, false, false},  // N = 3
                      MeshCase{1, 3, 1, 0, 1, false, true}, MeshCase{3, 1, 3, 0, 1, true, false},
                      MeshCase{2, 2, 1, 1, 1, false, false},  // N = 4
                      MeshCase{2, 2, 1, 2, 2, false, true}, MeshCase{4, 1, 2, 0, 1, true, false},
                      MeshCase{4, 1, 2, 0, 2, true, true},
                      MeshCase{4, 2, 1, 1, 1, false, false},  // N = 8
                      MeshCase{2, 4, 1, 2, 1, false, true}, MeshCase{8, 1, 2, 0, 1, true, false},
                      MeshCase{8, 1, 4, 0, 1, true, true},
                      MeshCase{4, 4, 1, 1, 1, false, false},  // N = 16
                      MeshCase{16, 1, 4, 0, 1, true, false},
                      // ZeRO-3 along dp of a tensor-parallel MLP.
                      MeshCase{2, 2, 1, 3, 1, false, false}, MeshCase{2, 2, 1, 3, 2, false, true},
                      MeshCase{4, 2, 1, 3, 1, false, false}, MeshCase{3, 2, 1, 3, 1, false, true},
                      // ZeRO along the data axis of expert parallelism (ep_zero.h).
                      MeshCase{2, 1, 2, 1, 1, true, false}, MeshCase{4, 1, 2, 2, 1, true, true},
                      MeshCase{8, 1, 2, 1, 2, true, true}, MeshCase{3, 1, 3, 2, 1, true, false},
                      // ZeRO-3 of expert-parallel layers (experts gathered for the step).
                      MeshCase{2, 1, 2, 3, 1, true, false}, MeshCase{4, 1, 2, 3, 2, true, true},
                      MeshCase{8, 1, 4, 3, 1, true, false},
                      // Megatron's expert tensor parallelism: each expert's hidden width split.
                      MeshCase{1, 2, 1, 0, 1, true, false}, MeshCase{2, 2, 1, 1, 2, true, true},
                      MeshCase{2, 2, 1, 3, 1, true, false}, MeshCase{1, 4, 1, 0, 1, true, true},
                      // ... and inside expert parallelism (tp x ep).
                      MeshCase{2, 2, 2, 0, 1, true, false}, MeshCase{4, 2, 2, 1, 2, true, true},
                      MeshCase{4, 2, 2, 3, 1, true, false}),
    [](const auto& info) { return case_name(info.param); });

// A preset given by its mesh flags runs the preset: the same bits.
TEST(MeshPresets, MeshFlagsOfAPresetRunThePresetBitForBit) {
  struct Pair {
    MeshCase mesh;
    Strategy preset;
  };
  for (const Pair& p : {Pair{{4, 1, 1, 0, 1, false, false}, Strategy::kDdp},
                        Pair{{4, 1, 1, 3, 1, false, true}, Strategy::kZero3},
                        Pair{{1, 4, 1, 0, 1, false, false}, Strategy::kTp},
                        Pair{{2, 2, 1, 0, 1, false, false}, Strategy::kDpTp},
                        Pair{{4, 1, 4, 0, 1, true, false}, Strategy::kEp}}) {
    SCOPED_TRACE(case_name(p.mesh));
    TrainConfig mesh = mesh_config(p.mesh);
    mesh.moe.moe.num_experts = 4;
    TrainConfig preset = mesh;
    preset.strategy = p.preset;
    resolve_preset(mesh);
    EXPECT_EQ(mesh.strategy, p.preset);
    const RunResult a = run_training(mesh), b = run_training(preset);
    EXPECT_EQ(a.losses, b.losses);
    EXPECT_EQ(a.params, b.params);
  }
}

// ZeRO-1/2 along dp x ep changes no sum under --algo deterministic (a reduce-scatter and an
// all-gather instead of the all-reduce), so it is bitwise equal to dp x ep without ZeRO;
// each rank keeps Adam state for its shards only: of the replicated tensors over dp and of
// its experts over the ranks holding them (the rank's own when dp = ep).
TEST(MeshZeroWithEp, BitwiseEqualToEpWithoutZeroWithAdamStateSharded) {
  for (const MeshCase& m :
       {MeshCase{4, 1, 2, 1, 2, true, true}, MeshCase{4, 1, 4, 2, 1, true, true},
        MeshCase{4, 1, 2, 2, 1, true, true}}) {
    SCOPED_TRACE(case_name(m));
    TrainConfig zero = mesh_config(m);
    zero.algo = Algo::kDeterministic;
    TrainConfig plain = zero;
    plain.zero = 0;
    const RunResult a = run_training(zero), b = run_training(plain);
    EXPECT_EQ(a.losses, b.losses);
    EXPECT_EQ(a.params, b.params);
    const model::MoeConfig& moe = zero.moe.moe;
    const size_t replicated = model::layout_of(model::moe_model_layers(zero.moe)).size() -
                              moe.num_experts * model::moe_expert_size(moe);
    const size_t experts = moe.num_experts / m.ep * model::moe_expert_size(moe);
    const int holders = m.dp / m.ep;
    for (int r = 0; r < m.dp; ++r) {
      const MeshCoord c = mesh_coord(zero.mesh(), r);
      const size_t want = model::shard_range(replicated, m.dp, r).size() +
                          model::shard_range(experts, holders, c.ep_group).size();
      EXPECT_EQ(a.ranks[r].memory[static_cast<int>(model::MemoryCategory::kAdamM)], 4 * want)
          << "rank " << r;
      // Without ZeRO-2's shard-only count, with several micro-batches also the experts'
      // gradients from the other ep - 1 sources, kept apart until the step's end (EpMoeBlock).
      const size_t partials = m.micro > 1 ? (m.ep - 1) * experts : 0;
      const size_t grads = m.zero == 2 ? want : replicated + experts + partials;
      EXPECT_EQ(a.ranks[r].memory[static_cast<int>(model::MemoryCategory::kGradients)], 4 * grads)
          << "rank " << r;
    }
  }
}

// ZeRO-3 along dp of dp x tp sums each layer's gradient over dp as the all-reduce does (one
// micro-batch, --algo deterministic), so it is bitwise equal to dp x tp without ZeRO; each
// rank keeps Adam state for its shard of its tensor-parallel slice only.
TEST(MeshZero3WithTp, BitwiseEqualToDpTpWithoutZeroWithTheSliceSharded) {
  const MeshCase m{2, 2, 1, 3, 1, false, true};
  TrainConfig zero = mesh_config(m);
  zero.algo = Algo::kDeterministic;
  TrainConfig plain = zero;
  plain.zero = 0;
  const RunResult a = run_training(zero), b = run_training(plain);
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.params, b.params);
  for (int r = 0; r < zero.ranks; ++r) {
    const MeshCoord c = mesh_coord(zero.mesh(), r);
    const Zero3Layout shards(model::layout_of(tp_mlp_layers(zero.mlp, c.tp, m.tp, nullptr)), m.dp);
    EXPECT_EQ(a.ranks[r].memory[static_cast<int>(model::MemoryCategory::kAdamM)],
              int64_t(4 * shards.shard_size()))
        << "rank " << r;
  }
}

// A pipeline's chunks: the blocks split evenly, the head on the last chunk, each chunk's
// initial parameters the whole model's slice, bit for bit.
TEST(PipelineLayers, ChunksCoverTheModelWithItsInitialParameters) {
  TrainConfig c = mlp_config(Strategy::kMesh, 1);
  c.mlp.num_blocks = 4;
  Trainee whole(c);
  std::vector<float> joined;
  for (int chunk = 0; chunk < 2; ++chunk) {
    Trainee part(c, pipeline_layers(c, 2 * chunk, 2 * chunk + 2));
    EXPECT_EQ(part.stack().num_layers(), chunk == 1 ? 3 : 2);
    const std::vector<float> p = part.store().params_as_float();
    joined.insert(joined.end(), p.begin(), p.end());
  }
  EXPECT_EQ(joined, whole.store().params_as_float());
  EXPECT_THROW(pipeline_layers(c, 3, 5), UsageError);
}

struct BadMesh {
  const char* name;
  void (*edit)(TrainConfig&);
  const char* message;
};

class InvalidMesh : public ::testing::TestWithParam<BadMesh> {};

TEST_P(InvalidMesh, IsOneLineNamingTheFlagsAndTheConstraint) {
  TrainConfig c = mesh_config({2, 2, 1, 0, 1, false, false});
  GetParam().edit(c);
  try {
    validate(c);
    FAIL() << "accepted";
  } catch (const UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(GetParam().message), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, InvalidMesh,
    ::testing::Values(BadMesh{"ProductIsNotTheWorld", [](TrainConfig& c) { c.ranks = 8; },
                              "--dp 2 x --tp 2 x --pp 1 = 4 ranks, but the world has 8"},
                      BadMesh{"EpDoesNotDivideDp",
                              [](TrainConfig& c) {
                                c.model = ModelKind::kMoe;
                                c.widths.tp = 1;
                                c.widths.dp = 4;
                                c.widths.ep = 3;
                              },
                              "--ep 3 does not divide --dp 4"},
                      BadMesh{"EpOnAnMlp", [](TrainConfig& c) { c.widths.ep = 2; },
                              "--ep 2 shards the MoE's experts"},
                      BadMesh{"HiddenNotDivisibleByTp",
                              [](TrainConfig& c) { c.mlp.hidden_dim = 25; },
                              "--hidden 25 is not divisible by --tp 2"},
                      BadMesh{"LayersDoNotSplitIntoStages",
                              [](TrainConfig& c) {
                                c.widths.pp = 4;
                                c.ranks = 16;
                                c.mlp.num_blocks = 3;
                              },
                              "--layers 3 leaves pipeline chunk 0 of --pp x --virtual-stages = 4"}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace dtsim::train
