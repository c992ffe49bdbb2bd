// Activation bytes from the estimator against what `dtsim train` measures (the step runner's
// peak of the activations category) on the same small shapes: within 5%. mlp and moe with
// data and tensor parallelism; gpt with tp 1, 2, 4, sequence parallelism and recomputation.
#include <gtest/gtest.h>

#include "tests/train/train_test_util.h"
#include "train/estimate/activations.h"
#include "train/strategies.h"

namespace dtsim::train {
namespace {

using estimator::Architecture;
using estimator::ArchKind;

double measured_activations(const TrainConfig& c) {
  const RunResult r = run_training(c);
  int64_t peak = 0;
  for (const RankReport& rank : r.ranks) {
    peak = std::max(peak, rank.memory[static_cast<int>(model::MemoryCategory::kActivations)]);
  }
  return static_cast<double>(peak);
}

double estimated_activations(const TrainConfig& c, int data_ranks, int tp) {
  Architecture a;
  a.kind = c.model == ModelKind::kMlp ? ArchKind::kMlp : ArchKind::kMoe;
  a.mlp = c.mlp;
  a.moe = c.moe;
  const int micro_batch = c.global_batch / (data_ranks * c.micro_batches);
  return estimator::dtsim_measured_activations(a, micro_batch,
                                               c.precision == model::Precision::kMixedBf16, tp);
}

struct Case {
  const char* name;
  ConfigSpec spec;
  int data_ranks;
  int tp = 1;
};

class EstimateMeasured : public ::testing::TestWithParam<Case> {};

TEST_P(EstimateMeasured, ActivationsWithinFivePercent) {
  const Case& k = GetParam();
  TrainConfig c = make_config(k.spec);
  c.steps = 2;
  const double measured = measured_activations(c);
  const double estimated = estimated_activations(c, k.data_ranks, k.tp);
  ASSERT_GT(measured, 0);
  RecordProperty("estimated_over_measured", std::to_string(estimated / measured));
  EXPECT_NEAR(estimated / measured, 1.0, 0.05)
      << "estimated " << estimated << " B, measured " << measured << " B";
}

constexpr model::Precision kBf16 = model::Precision::kMixedBf16;
constexpr model::OptimizerKind kAdam = model::OptimizerKind::kAdam;

INSTANTIATE_TEST_SUITE_P(
    Shapes, EstimateMeasured,
    ::testing::Values(Case{"mlp_single", {.batch = 48, .dim = 32, .hidden = 128, .layers = 3}, 1},
                      Case{"mlp_ddp4",
                           {.strategy = Strategy::kDdp,
                            .ranks = 4,
                            .batch = 64,
                            .dim = 32,
                            .hidden = 128,
                            .layers = 2},
                           4},
                      Case{"mlp_accum4",
                           {.strategy = Strategy::kAccum,
                            .batch = 64,
                            .micro_batches = 4,
                            .dim = 32,
                            .hidden = 128},
                           1},
                      Case{"mlp_zero2_bf16_adam",
                           {.strategy = Strategy::kZero2,
                            .ranks = 2,
                            .batch = 32,
                            .opt = kAdam,
                            .precision = kBf16,
                            .dim = 32,
                            .hidden = 128},
                           2},
                      Case{"mlp_tp2",
                           {.strategy = Strategy::kTp,
                            .ranks = 2,
                            .batch = 32,
                            .dim = 32,
                            .hidden = 128,
                            .layers = 3},
                           1,
                           2},
                      Case{"mlp_tp4_bf16",
                           {.strategy = Strategy::kTp,
                            .ranks = 4,
                            .batch = 32,
                            .precision = kBf16,
                            .dim = 32,
                            .hidden = 128},
                           1,
                           4},
                      Case{"mlp_dp2_tp2",
                           {.strategy = Strategy::kDpTp,
                            .ranks = 4,
                            .tp = 2,
                            .batch = 32,
                            .dim = 32,
                            .hidden = 128},
                           2,
                           2},
                      Case{"moe_single",
                           {.model = ModelKind::kMoe,
                            .batch = 64,
                            .dim = 16,
                            .hidden = 32,
                            .layers = 1,
                            .experts = 4,
                            .capacity = 0},
                           1},
                      Case{"moe_ddp2",
                           {.strategy = Strategy::kDdp,
                            .model = ModelKind::kMoe,
                            .ranks = 2,
                            .batch = 64,
                            .dim = 16,
                            .hidden = 64,
                            .experts = 8,
                            .capacity = 0},
                           2}),
    [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

// gpt on a tensor-parallel mesh (every rank all layers): the estimator's count of dtsim's
// GPT against each rank's measured peak, with sequence parallelism and recomputation.
struct GptCase {
  const char* name;
  int tp = 1;
  bool sp = false;
  estimator::Recompute recompute = estimator::Recompute::kNone;
};

class EstimateMeasuredGpt : public ::testing::TestWithParam<GptCase> {};

TEST_P(EstimateMeasuredGpt, ActivationsWithinFivePercent) {
  const GptCase& k = GetParam();
  TrainConfig c = make_config({.strategy = Strategy::kMesh, .steps = 2});
  c.model = ModelKind::kGpt;
  c.gpt = {.vocab = 11,
           .seq_len = 16,
           .d_model = 32,
           .heads = 4,
           .head_dim = 8,
           .num_layers = 3,
           .mlp_hidden = 96};
  c.global_batch = 6;
  c.widths.tp = k.tp;
  c.ranks = k.tp;
  c.sequence_parallel = k.sp;
  c.recompute = k.recompute == estimator::Recompute::kFull        ? model::Recompute::kFull
                : k.recompute == estimator::Recompute::kSelective ? model::Recompute::kSelective
                                                                  : model::Recompute::kNone;
  resolve_preset(c);
  const double measured = measured_activations(c);
  const estimator::GptShape g{
      .layers = 3, .hidden = 32, .heads = 4, .ffn = 96, .vocab = 11, .seq = 16};
  const double estimated = estimator::dtsim_measured_gpt_activations(
      g, {.tp = k.tp, .sequence_parallel = k.sp, .recompute = k.recompute, .micro_batch = 6});
  ASSERT_GT(measured, 0);
  RecordProperty("estimated_over_measured", std::to_string(estimated / measured));
  EXPECT_NEAR(estimated / measured, 1.0, 0.05)
      << "estimated " << estimated << " B, measured " << measured << " B";
}

using estimator::Recompute;
INSTANTIATE_TEST_SUITE_P(
    Gpt, EstimateMeasuredGpt,
    ::testing::Values(GptCase{"gpt_tp1"}, GptCase{"gpt_tp2", 2}, GptCase{"gpt_tp4", 4},
                      GptCase{"gpt_tp2_sp", 2, true}, GptCase{"gpt_tp4_sp", 4, true},
                      GptCase{"gpt_tp1_selective", 1, false, Recompute::kSelective},
                      GptCase{"gpt_tp2_sp_selective", 2, true, Recompute::kSelective},
                      GptCase{"gpt_tp1_full", 1, false, Recompute::kFull},
                      GptCase{"gpt_tp4_sp_full", 4, true, Recompute::kFull}),
    [](const ::testing::TestParamInfo<GptCase>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace dtsim::train
