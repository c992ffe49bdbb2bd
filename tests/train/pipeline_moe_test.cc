// An MoE model inside pipeline stages: the classifier with L MoE layers (--layers) cut into
// p v chunks (the embedding rides with the first, the head with the last). Each MoE layer
// routes every micro-batch on its own and weighs its aux loss in that micro-batch's
// backward, as single-rank accumulation does, so with --algo deterministic dp x pp (ZeRO-0,
// 1 along dp) is bitwise equal to accumulation over the same dp x M micro-batches; so is
// --ep = dp, where the experts are sharded over the stage's expert group and each expert
// keeps its sources' gradients apart until they are summed in accumulation's group order.
// With dp > ep the groups holding the same experts sum across in two levels (within fp32
// tolerance). check.h's plan must say the same.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "model/layer_stack.h"
#include "model/moe_model.h"
#include "pipeline_test_util.h"
#include "train/check.h"
#include "train/mesh_shape.h"
#include "train/pipeline_parallel/pipeline_parallel.h"
#include "train/pipeline_parallel/pipeline_stage.h"
#include "train/strategies.h"
#include "train_test_util.h"

namespace dtsim::train::pipeline {
namespace {

struct MoeCase {
  ScheduleSpec spec;
  int dp = 1;
  int ep = 1;      // experts sharded over groups of ep dp ranks
  int layers = 2;  // MoE layers
  int zero = 0;
  model::Precision precision = model::Precision::kFp32;
  bool adam = false;  // with --ep > 1 (default SGD there, see config_of)
};

void PrintTo(const MoeCase& c, std::ostream* os) {
  PrintTo(c.spec, os);
  *os << " dp " << c.dp << " ep " << c.ep << " L " << c.layers << " zero " << c.zero;
}

std::string case_name(const MoeCase& c) {
  return test_name(c.spec) + "_dp" + std::to_string(c.dp) +
         (c.ep > 1 ? "_ep" + std::to_string(c.ep) : "") + "_L" + std::to_string(c.layers) +
         (c.zero > 0 ? "_zero" + std::to_string(c.zero) : "") +
         (c.precision == model::Precision::kMixedBf16 ? "_bf16" : "") + (c.adam ? "_adam" : "");
}

TrainConfig config_of(const MoeCase& c) {
  TrainConfig config = moe_config(Strategy::kMesh, c.dp * c.spec.stages);
  config.widths.tp = 1;
  config.widths.ep = c.ep;
  config.moe.num_blocks = c.layers;
  config = pipeline_config(config, c.spec, c.dp, c.zero, c.precision);
  if (c.ep > 1 && !c.adam) {
    // With dp > ep, Adam turns the two-level expert sums into drift in near-zero gradients
    // (with or without --pp: the pipeline is bitwise equal to plain dp x ep there,
    // PipelineMoeEp below); SGD shows the gradients themselves, within 1e-07.
    config.optimizer = model::OptimizerKind::kSgd;
    config.lr = 0.05f;
  }
  if (c.adam) {
    config.optimizer = model::OptimizerKind::kAdam;
    config.lr = 0.01f;
  }
  return config;
}

class PipelineMoe : public ::testing::TestWithParam<MoeCase> {};

TEST_P(PipelineMoe, MatchesAccumulationBitwiseUnlessDpExceedsEpAndSendsTheFormula) {
  const MoeCase c = GetParam();
  const TrainConfig config = config_of(c);
  const CheckPlan plan = plan_check(config);
  EXPECT_EQ(plan.reference.strategy, Strategy::kAccum);
  EXPECT_EQ(plan.reference.ranks, c.dp);  // dp groups of M micro-batches
  const bool bitwise = c.ep == 1 || c.ep == c.dp;
  EXPECT_EQ(plan.bitwise, bitwise);

  const RunResult got = run_training(config);
  const RunResult want = run_training(plan.reference);
  ASSERT_EQ(got.params.size(), want.params.size());
  ASSERT_EQ(got.params.size(), model::moe_model_layout(config.moe).size());
  if (bitwise) {  // params and losses to the last bit
    EXPECT_TRUE(compare(got, want, 0, 0).bitwise_equal) << compare(got, want, 0, 0);
  } else {  // the expert groups' sums meet in two levels: fp32 tolerance
    EXPECT_TRUE(compare(got, want, kFp32Rtol, kFp32Atol).passed) << compare(got, want, 0, 0);
  }
  EXPECT_TRUE(judge(plan, got, want).passed);

  const int b = config.global_batch / (c.dp * c.spec.micro_batches);
  for (int r = 0; r < config.ranks; ++r) {
    const MeshCoord at = mesh_coord(config.mesh(), r);
    const OpCounters& sent = got.ranks[r].counters[OpKind::kSend];
    EXPECT_EQ(sent.bytes_sent,
              config.steps * p2p_bytes_per_step(c.spec, at.pp, b, config.moe.moe.d_model))
        << "rank " << r;
    if (c.ep > 1) continue;
    // Adam's m: the stage's chunks, or under ZeRO-1 this dp rank's shard of each.
    int64_t m_bytes = 0;
    for (int ch = at.pp; ch < c.spec.stages * c.spec.virtual_stages; ch += c.spec.stages) {
      const auto [first, last] = chunk_layers(config, c.spec, ch);
      model::Layers all = model::moe_model_layers(config.moe);
      model::Layers mine(std::make_move_iterator(all.begin() + first),
                         std::make_move_iterator(all.begin() + last));
      const size_t n = model::layout_of(mine).size();
      m_bytes += 4 * (c.zero ? model::shard_range(n, c.dp, at.dp).size() : n);
    }
    EXPECT_EQ(got.ranks[r].memory[static_cast<int>(model::MemoryCategory::kAdamM)], m_bytes)
        << "rank " << r;
  }
}

std::vector<MoeCase> moe_cases() {
  using enum ScheduleKind;
  std::vector<MoeCase> v;
  v.push_back({{kOneFOneB, 2, 4, 1}});
  v.push_back({{kGpipe, 2, 4, 1}});
  v.push_back({{kOneFOneB, 4, 8, 1}, 1, 1, 4});
  v.push_back({{kInterleaved, 2, 4, 2}, 1, 1, 4});
  v.push_back({{kOneFOneB, 2, 4, 1}, 2});           // dp x pp
  v.push_back({{kOneFOneB, 2, 4, 1}, 2, 1, 2, 1});  // ZeRO-1 along dp
  v.push_back({{kOneFOneB, 2, 4, 1}, 2, 2});        // dp x ep x pp
  v.push_back({{kGpipe, 2, 4, 1}, 4, 2});           // two expert groups per stage
  v.push_back({{kOneFOneB, 2, 4, 1}, 2, 2, 2, 1});  // ZeRO-1 along dp x ep
  v.push_back({{kGpipe, 2, 4, 1}, 4, 2, 2, 2});     // ZeRO-2, experts over expert_dp
  v.push_back({{kOneFOneB, 2, 4, 1}, 2, 1, 2, 0, model::Precision::kMixedBf16});
  // dp = ep with Adam, which amplified the experts' reordered sums before they kept
  // accumulation's order: bitwise, at 1 and 2 MoE layers per stage, fp32 and bf16, ZeRO-1.
  v.push_back({{kOneFOneB, 2, 4, 1}, 2, 2, 2, 0, model::Precision::kFp32, true});
  v.push_back({{kGpipe, 2, 4, 1}, 4, 4, 4, 0, model::Precision::kFp32, true});
  v.push_back({{kOneFOneB, 2, 4, 1}, 2, 2, 2, 1, model::Precision::kFp32, true});
  v.push_back({{kOneFOneB, 2, 4, 1}, 2, 2, 2, 0, model::Precision::kMixedBf16, true});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Moe, PipelineMoe, ::testing::ValuesIn(moe_cases()),
                         [](const auto& info) { return case_name(info.param); });

// The pipeline changes no float operation of dp x ep: each stage's expert group routes,
// dispatches and sums the same tokens as the unpipelined run (both scale by the replica's
// mean and divide by dp), and ZeRO's reduce-scatter sums as the
// all-reduce does, so all are bitwise equal to dp x ep without pipeline or ZeRO, Adam included.
TEST(PipelineMoeEp, BitwiseEqualToTheSameDpxEpWithoutAPipeline) {
  for (const int dp : {2, 4}) {
    for (const int zero : {0, 1, 2}) {
      TrainConfig piped = config_of({{ScheduleKind::kOneFOneB, 2, 4, 1}, dp, 2, 2, zero});
      piped.optimizer = model::OptimizerKind::kAdam;
      piped.lr = 0.01f;
      TrainConfig flat = piped;
      flat.widths.pp = 1;
      flat.ranks = dp;
      flat.zero = 0;
      EXPECT_TRUE(compare(run_training(piped), run_training(flat), 0, 0).bitwise_equal)
          << "dp " << dp << " zero " << zero;
    }
  }
}

TEST(PipelineMoeChunks, EmbeddingRidesWithTheFirstChunkAndTheHeadWithTheLast) {
  TrainConfig config = config_of({{ScheduleKind::kOneFOneB, 4, 8, 1}, 1, 1, 4});
  const ScheduleSpec spec = schedule_spec(config);
  // Layers: 0 embed, 1..4 MoE, 5 head.
  EXPECT_EQ(chunk_layers(config, spec, 0), std::make_pair(0, 2));
  EXPECT_EQ(chunk_layers(config, spec, 1), std::make_pair(2, 3));
  EXPECT_EQ(chunk_layers(config, spec, 2), std::make_pair(3, 4));
  EXPECT_EQ(chunk_layers(config, spec, 3), std::make_pair(4, 6));
  config.moe.num_blocks = 1;
  EXPECT_EQ(validate_pipeline(config, spec, 1),
            "--layers 1 leaves pipeline chunk 1 of --pp x --virtual-stages = 4 with no layer; give "
            "--layers 4 or more, or --stage-layers");
}

}  // namespace
}  // namespace dtsim::train::pipeline
