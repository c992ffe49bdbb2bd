// dp x pp training of the MLP under every schedule the executor runs: with --algo
// deterministic it is bitwise equal to single-rank accumulation over the same micro-batches
// (run_accum with dp groups of M), and every rank sends per step the point-to-point bytes of
// the formula.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "model/layer_stack.h"
#include "model/mlp.h"
#include "pipeline_test_util.h"
#include "train/pipeline_parallel/pipeline_parallel.h"
#include "train/pipeline_parallel/pipeline_stage.h"
#include "train/pipeline_parallel/schedule_check.h"
#include "train/strategies.h"
#include "train_test_util.h"

namespace dtsim::train::pipeline {
namespace {

struct Case {
  ScheduleSpec spec;
  int dp = 1;
  int layers = 4;
  model::Precision precision = model::Precision::kFp32;
  int zero = 0;  // ZeRO stage along dp
};

void PrintTo(const Case& c, std::ostream* os) {
  PrintTo(c.spec, os);
  *os << " dp " << c.dp << " layers " << c.layers;
}

std::string case_name(const Case& c) {
  return test_name(c.spec) + "_dp" + std::to_string(c.dp) + "_L" + std::to_string(c.layers) +
         (c.precision == model::Precision::kMixedBf16 ? "_bf16" : "") +
         (c.zero > 0 ? "_zero" + std::to_string(c.zero) : "");
}

TrainConfig config_of(const Case& c) {
  TrainConfig config = mlp_config(Strategy::kDdp, c.dp * c.spec.stages);
  config.mlp.num_blocks = c.layers;
  config.micro_batches = c.spec.micro_batches;
  config.global_batch = 8 * c.dp * c.spec.micro_batches;
  config.algo = Algo::kDeterministic;
  config.optimizer = model::OptimizerKind::kAdam;
  config.lr = 0.01f;
  config.precision = c.precision;
  config.steps = 3;
  return config;
}

class PipelineTraining : public ::testing::TestWithParam<Case> {};

TEST_P(PipelineTraining, BitwiseEqualToAccumulationAndSendsTheFormula) {
  const Case c = GetParam();
  const TrainConfig config = config_of(c);
  const RunResult got = *run_pipeline(config, c.spec, c.dp, c.zero);

  TrainConfig accum = config;
  accum.strategy = Strategy::kAccum;
  accum.ranks = c.dp;  // dp groups of M micro-batches
  const RunResult want = run_accum(accum);

  ASSERT_EQ(got.params.size(), want.params.size());
  EXPECT_EQ(std::memcmp(got.params.data(), want.params.data(), want.params.size() * sizeof(float)),
            0)
      << compare(got, want, 0, 0);
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t s = 0; s < want.losses.size(); ++s) {
    EXPECT_NEAR(got.losses[s], want.losses[s], 1e-6 * std::abs(want.losses[s])) << "step " << s;
  }
  const int b = config.global_batch / (c.dp * c.spec.micro_batches);
  const int width = config.mlp.input_dim;
  for (int r = 0; r < config.ranks; ++r) {
    const OpCounters& sent = got.ranks[r].counters[OpKind::kSend];
    EXPECT_EQ(sent.bytes_sent,
              config.steps * p2p_bytes_per_step(c.spec, r % c.spec.stages, b, width))
        << "rank " << r;
    EXPECT_EQ(got.ranks[r].memory[static_cast<int>(model::MemoryCategory::kActivations)],
              stage_activation_bytes(config, c.spec, r % c.spec.stages, b))
        << "rank " << r << ": peak activations";
    // Adam's m: the stage's parameters, or under ZeRO-1 this dp rank's shard of each chunk.
    int64_t m_bytes = 0;
    const int stage = r % c.spec.stages, replica = r / c.spec.stages;
    for (int ch = stage; ch < c.spec.stages * c.spec.virtual_stages; ch += c.spec.stages) {
      const auto [first, last] = chunk_layers(config, c.spec, ch);
      const size_t n = model::layout_of(model::mlp_layers(config.mlp, first, last)).size();
      m_bytes += 4 * (c.zero ? model::shard_range(n, c.dp, replica).size() : n);
    }
    EXPECT_EQ(got.ranks[r].memory[static_cast<int>(model::MemoryCategory::kAdamM)], m_bytes)
        << "rank " << r;
  }
}

std::vector<Case> cases() {
  std::vector<Case> v;
  for (ScheduleKind k : {ScheduleKind::kGpipe, ScheduleKind::kOneFOneB}) {
    for (int p : {1, 2, 4}) v.push_back({{k, p, 8, 1}, 1, 4});
    v.push_back({{k, 2, 4, 1}, 2, 4});  // dp x pp
    v.push_back({{k, 3, 2, 1}, 1, 3});
  }
  v.push_back({{ScheduleKind::kOneFOneB, 8, 8, 1}, 2, 8});  // 16 ranks
  v.push_back({{ScheduleKind::kInterleaved, 4, 8, 2}, 1, 8});
  v.push_back({{ScheduleKind::kInterleaved, 2, 4, 2}, 2, 4});
  v.push_back({{ScheduleKind::kOneFOneB, 4, 8, 1}, 1, 4, model::Precision::kMixedBf16});
  v.push_back({{ScheduleKind::kOneFOneB, 2, 4, 1}, 2, 4, model::Precision::kFp32, 1});
  v.push_back({{ScheduleKind::kInterleaved, 2, 4, 2}, 4, 4, model::Precision::kFp32, 1});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Pipeline, PipelineTraining, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return case_name(info.param); });

TEST(PipelineTrace, EachStagesTrackIsItsScheduleAndTheWallBubbleIsMeasured) {
  const Case c{{ScheduleKind::kInterleaved, 2, 4, 2}, 2, 4};
  TrainConfig config = config_of(c);
  config.trace = true;
  const RunResult got = *run_pipeline(config, c.spec, c.dp);
  const Schedule schedule = make_schedule(c.spec);
  for (int r = 0; r < config.ranks; ++r) {
    std::vector<std::string> want, seen;
    for (int step = 0; step < config.steps; ++step) {
      for (const Action& a : schedule.ranks[r % c.spec.stages]) {
        if (is_compute(a.op)) want.push_back(label(a, 2, 2));
      }
    }
    for (const PhaseEvent& e : got.ranks[r].timeline) {
      if (e.name[0] == 'F' || e.name[0] == 'B') seen.push_back(e.name);
      EXPECT_LE(e.start, e.end);
    }
    EXPECT_EQ(seen, want) << "rank " << r << ": one F/B phase per micro-batch and chunk, in "
                          << "schedule order";
  }
  for (int replica = 0; replica < c.dp; ++replica) {
    std::vector<const std::vector<PhaseEvent>*> stages;
    for (int s = 0; s < c.spec.stages; ++s) {
      stages.push_back(&got.ranks[replica * c.spec.stages + s].timeline);
    }
    for (int step = 0; step < config.steps; ++step) {
      const WallBubble w = wall_bubble(stages, c.spec, step);
      EXPECT_GT(w.busy_seconds, 0);
      EXPECT_LE(w.busy_seconds, c.spec.stages * w.span_seconds);
      EXPECT_GE(w.bubble, 0);
      EXPECT_LT(w.bubble, 1);
    }
  }
}

TEST(PipelineTrainingRejects, WhatCannotRun) {
  TrainConfig config = config_of({{ScheduleKind::kOneFOneB, 4, 8, 1}, 1, 4});
  config.mlp.num_blocks = 6;
  EXPECT_EQ(validate_pipeline(config, {ScheduleKind::kOneFOneB, 4, 8, 1}, 1),
            "--layers 6 must be a multiple of --pp x --virtual-stages = 4 (each chunk holds the "
            "same number of blocks)");
  config.mlp.num_blocks = 4;
  EXPECT_NE(validate_pipeline(config, {ScheduleKind::kZeroBubbleH1, 4, 8, 1}, 1).find("zb-h1"),
            std::string::npos);
  config.model = ModelKind::kMoe;
  EXPECT_EQ(validate_pipeline(config, {ScheduleKind::kOneFOneB, 4, 8, 1}, 1),
            "--pp runs the MLP (--model mlp)");
}

}  // namespace
}  // namespace dtsim::train::pipeline
