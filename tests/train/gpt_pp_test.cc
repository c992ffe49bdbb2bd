// --model gpt on pipeline stages: a chunk takes whole transformer layers (an attention and
// an MLP block), the first also the embedding, the last the final norm and the head; every
// schedule whose layers it supports passes the lockstep check against single-rank training,
// alone and on a dp x tp (+ sequence parallel) x pp mesh with ZeRO.
#include <gtest/gtest.h>

#include <ostream>
#include <string>

#include "train/memory_plan.h"
#include "train/pipeline_parallel/pipeline_parallel.h"
#include "train/strategies.h"
#include "train_test_util.h"

namespace dtsim::train {
namespace {

struct GptPpCase {
  pipeline::ScheduleKind schedule = pipeline::ScheduleKind::kOneFOneB;
  int virtual_stages = 1, layers = 2, dp = 1, tp = 1, zero = 0;
  bool sp = false;
};
std::ostream& operator<<(std::ostream& os, const GptPpCase& p) {
  return os << pipeline::to_string(p.schedule) << "_v" << p.virtual_stages << "_L" << p.layers
            << "_dp" << p.dp << "_tp" << p.tp << "_zero" << p.zero << (p.sp ? "_sp" : "");
}

// A small GPT (S 8, V 7, 2 heads of 8, F 32) on pp 2 with 4 micro-batches.
TrainConfig gpt_pipeline(const GptPpCase& p) {
  TrainConfig c = with_adam(small_gpt(8, {.dp = p.dp, .tp = p.tp, .pp = 2}, 3));
  c.gpt.heads = 2;
  c.gpt.head_dim = 8;
  c.gpt.num_layers = p.layers;
  c.global_batch = 16;
  c.micro_batches = 4;
  c.schedule = p.schedule;
  c.virtual_stages = p.virtual_stages;
  c.zero = p.zero;
  c.sequence_parallel = p.sp;
  return c;
}

class GptPipeline : public ::testing::TestWithParam<GptPpCase> {};

TEST_P(GptPipeline, PassesTheCheckAgainstSingleRankTraining) {
  const TrainConfig c = gpt_pipeline(GetParam());
  RunResult run;
  const CheckResult r = run_and_check(c, &run);
  std::cout << "[gpt pp " << GetParam() << "] " << r << "\n";
  EXPECT_TRUE(r.passed) << r;
  EXPECT_EQ(run.ranks.size(), size_t(c.ranks));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, GptPipeline,
    ::testing::Values(GptPpCase{}, GptPpCase{.schedule = pipeline::ScheduleKind::kGpipe},
                      GptPpCase{.schedule = pipeline::ScheduleKind::kInterleaved,
                                .virtual_stages = 2,
                                .layers = 4},
                      GptPpCase{.tp = 2}, GptPpCase{.dp = 2, .tp = 2, .zero = 3, .sp = true}),
    [](const auto& info) { return ::testing::PrintToString(info.param); });

bool holds(const model::ParamLayout& layout, const std::string& name) {
  for (const model::ParamView& v : layout.views()) {
    if (v.name == name) return true;
  }
  return false;
}

TEST(GptPipeline, FirstStageHoldsTheEmbeddingLastTheFinalNormAndHead) {
  const TrainConfig c = gpt_pipeline({.layers = 4});
  const pipeline::ScheduleSpec spec = schedule_spec(c);
  const model::ParamLayout first = pipeline::stage_layout(c, spec, 0, {});
  const model::ParamLayout last = pipeline::stage_layout(c, spec, 1, {});
  EXPECT_TRUE(holds(first, "embed.wte"));
  EXPECT_TRUE(holds(first, "block1.mlp.w2"));
  EXPECT_FALSE(holds(first, "block2.attn.qkv.w"));
  EXPECT_FALSE(holds(first, "head.w"));
  EXPECT_TRUE(holds(last, "block2.attn.qkv.w"));
  EXPECT_TRUE(holds(last, "lnf.g"));
  EXPECT_TRUE(holds(last, "head.w"));
  EXPECT_FALSE(holds(last, "embed.wte"));
  EXPECT_EQ(first.size() + last.size(), model_layout(c).size());
}

// The memory plan (the spec's activation_floats for L / pp blocks, times the micro-batches
// a stage holds at once) bounds what each rank measures, and not by more than 3x, as
// memory_plan_test.cc asks of the other models.
TEST(GptPipeline, MemoryPlanBoundsTheMeasuredPeak) {
  for (const GptPpCase& p : {GptPpCase{.layers = 4}, GptPpCase{.layers = 4, .tp = 2, .sp = true}}) {
    const TrainConfig c = gpt_pipeline(p);
    const MemoryPlan plan = plan_memory(c);
    const RunResult run = run_training(c);
    ASSERT_EQ(plan.rank_bytes.size(), run.ranks.size());
    for (size_t r = 0; r < run.ranks.size(); ++r) {
      int64_t measured = 0;
      for (int64_t b : run.ranks[r].memory) measured += b;
      EXPECT_GE(plan.rank_bytes[r], measured) << p << " rank " << r;
      EXPECT_LE(plan.rank_bytes[r], 3 * measured) << p << " rank " << r;
    }
  }
}

TEST(GptPipeline, RejectsTheSplitBackwardSchedule) {
  TrainConfig c = gpt_pipeline({.schedule = pipeline::ScheduleKind::kZeroBubbleH1});
  try {
    validate(c);
    ADD_FAILURE() << "zb-h1 accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--schedule zb-h1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dtsim::train
