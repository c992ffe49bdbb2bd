// The whole grid of parallelisms (issue 32): dp, tp, pp, ep in {1, 2}, ZeRO 0-3, mlp and moe,
// every schedule at pp 2, activation recomputation none, selective and full. Each cell either
// trains and passes the lockstep check, or is refused by validate() with a one-line reason;
// the test fails on any other outcome and prints every cell, then a summary (docs/mesh.md's
// copy comes from this command):
//   build/tests/train/train_test --gtest_filter='Grid.*'
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "train/pipeline_parallel/pipeline_parallel.h"
#include "train/pipeline_parallel/schedule.h"
#include "train_test_util.h"

namespace dtsim::train {
namespace {

struct Cell {
  int dp, tp, pp, ep, zero;
  ModelKind model;
  pipeline::ScheduleKind schedule;
  model::Recompute recompute;
};

std::string mesh_text(const Cell& c) {
  std::string s = "dp" + std::to_string(c.dp) + " tp" + std::to_string(c.tp) + " pp" +
                  std::to_string(c.pp) + " ep" + std::to_string(c.ep);
  return s;
}

TrainConfig cell_config(const Cell& cell) {
  ConfigSpec spec{.strategy = Strategy::kMesh,
                  .model = cell.model,
                  .ranks = cell.dp * cell.tp * cell.pp,
                  .steps = 3,
                  .batch = 16,
                  .micro_batches = cell.pp > 1 ? 2 : 1};
  TrainConfig c = make_config(spec);
  c.widths.dp = cell.dp;
  c.widths.tp = cell.tp;
  c.widths.pp = cell.pp;
  c.widths.ep = cell.ep;
  c.zero = cell.zero;
  c.schedule = cell.schedule;
  c.recompute = cell.recompute;
  c.moe.num_blocks = 2;
  if (cell.schedule == pipeline::ScheduleKind::kInterleaved && cell.pp > 1) {
    c.virtual_stages = 2;  // two chunks per stage: four of the model's layers
    c.mlp.num_blocks = c.moe.num_blocks = 4;
  }
  return c;
}

std::vector<Cell> grid() {
  using pipeline::ScheduleKind;
  std::vector<Cell> cells;
  for (ModelKind model : {ModelKind::kMlp, ModelKind::kMoe}) {
    for (int pp : {1, 2}) {
      const std::vector<ScheduleKind> schedules =
          pp == 1
              ? std::vector<ScheduleKind>{ScheduleKind::kOneFOneB}
              : std::vector<ScheduleKind>{ScheduleKind::kGpipe, ScheduleKind::kOneFOneB,
                                          ScheduleKind::kInterleaved, ScheduleKind::kZeroBubbleH1};
      for (ScheduleKind schedule : schedules) {
        for (int dp : {1, 2}) {
          for (int tp : {1, 2}) {
            for (int ep : {1, 2}) {
              for (int zero = 0; zero <= 3; ++zero) {
                for (model::Recompute r : {model::Recompute::kNone, model::Recompute::kSelective,
                                           model::Recompute::kFull}) {
                  cells.push_back({dp, tp, pp, ep, zero, model, schedule, r});
                }
              }
            }
          }
        }
      }
    }
  }
  return cells;
}

// The refusals the grid may meet: the first is meaningless (experts to shard on a model
// without experts), the second a combination not built yet. A refusal outside this list
// fails the test, and each entry removed here as its combination lands.
const char* const kKnownRefusals[] = {
    "shards the MoE's experts: it needs --model moe",
    "does not divide --dp",  // ep inside dp only
};

TEST(Grid, EveryCellPassesTheCheckOrIsRefusedWithItsReason) {
  int passed = 0, refused = 0, failed = 0;
  // Per (model, pipeline) and recompute none / selective / full: cells passed, refused.
  std::map<std::string, std::array<std::pair<int, int>, 3>> summary;
  std::printf("%-5s %-22s %-11s %-4s %-9s %s\n", "model", "mesh", "schedule", "zero", "recompute",
              "outcome");
  for (const Cell& cell : grid()) {
    const TrainConfig c = cell_config(cell);
    std::string outcome;
    try {
      validate(c);
    } catch (const UsageError& e) {
      outcome = std::string("refused: ") + e.what();
      ++refused;
      EXPECT_EQ(outcome.find('\n'), std::string::npos) << outcome;
      bool known = false;
      for (const char* k : kKnownRefusals) known = known || outcome.find(k) != std::string::npos;
      EXPECT_TRUE(known) << mesh_text(cell) << ": " << outcome;
    }
    if (outcome.empty()) {
      RunResult run;
      const CheckResult r = run_and_check(c, &run);
      outcome = std::string(r.passed ? "PASS" : "FAIL") + " " + r.verdict_text;
      if (r.passed) {
        ++passed;
      } else {
        ++failed;
        ADD_FAILURE() << mesh_text(cell) << " zero " << cell.zero << " " << to_string(cell.model)
                      << ": " << r;
      }
    }
    const char* schedule = cell.pp > 1 ? pipeline::to_string(cell.schedule) : "-";
    std::printf("%-5s %-22s %-11s %-4d %-9s %s\n", to_string(cell.model), mesh_text(cell).c_str(),
                schedule, cell.zero, model::recompute_name(cell.recompute), outcome.c_str());
    std::pair<int, int>& counts =
        summary[std::string(to_string(cell.model)) + (cell.pp > 1 ? " pp2 " : " pp1 ") + schedule]
               [static_cast<int>(cell.recompute)];
    (outcome.rfind("PASS", 0) == 0 ? counts.first : counts.second) += 1;
  }
  std::printf("\n%-27s %10s %10s %10s\n", "passed/refused", "none", "selective", "full");
  for (const auto& [key, by_recompute] : summary) {
    std::printf("%-27s", key.c_str());
    for (const auto& [pass, refuse] : by_recompute) {
      std::printf(" %10s", (std::to_string(pass) + "/" + std::to_string(refuse)).c_str());
    }
    std::printf("\n");
  }
  std::printf("grid: %d cells train and pass, %d refused, %d fail\n", passed, refused, failed);
  EXPECT_EQ(failed, 0);
}

}  // namespace
}  // namespace dtsim::train

namespace dtsim::train {
namespace {

// Uneven pipeline stages: layers need not divide by pp x virtual stages; the balanced split
// and an explicit one both train and pass the check, and each chunk holds its blocks.
struct UnevenCase {
  const char* name;
  int pp, layers, micro;
  std::vector<int> stage_layers;
};

class UnevenStages : public ::testing::TestWithParam<UnevenCase> {};

TEST_P(UnevenStages, TrainAndPassTheCheck) {
  const UnevenCase p = GetParam();
  TrainConfig c = make_config({.strategy = Strategy::kMesh,
                               .ranks = p.pp,
                               .batch = 16,
                               .micro_batches = p.micro,
                               .layers = p.layers});
  c.widths.pp = p.pp;
  c.widths.tp = 1;
  c.stage_layers = p.stage_layers;
  const pipeline::ScheduleSpec spec = schedule_spec(c);
  int blocks = 0;
  for (int chunk = 0; chunk < p.pp; ++chunk) {
    const auto [first, last] = pipeline::chunk_layers(c, spec, chunk);
    const int mine = last - first - (chunk == p.pp - 1 ? 1 : 0);  // the head rides last
    if (!p.stage_layers.empty()) {
      EXPECT_EQ(mine, p.stage_layers[chunk]) << "chunk " << chunk;
    }
    EXPECT_GE(mine, 1) << "chunk " << chunk;
    blocks += mine;
  }
  EXPECT_EQ(blocks, p.layers);
  const CheckResult r = run_and_check(c);
  EXPECT_TRUE(r.passed) << r;
}

INSTANTIATE_TEST_SUITE_P(Cases, UnevenStages,
                         ::testing::Values(UnevenCase{"pp3_layers4", 3, 4, 4, {}},
                                           UnevenCase{"pp2_layers3", 2, 3, 2, {}},
                                           UnevenCase{"pp2_explicit_2_1", 2, 3, 2, {2, 1}},
                                           UnevenCase{"pp3_explicit_1_3_1", 3, 5, 4, {1, 3, 1}}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(UnevenStages, CountsThatDoNotAddUpAreRefused) {
  TrainConfig c =
      make_config({.strategy = Strategy::kMesh, .ranks = 2, .micro_batches = 2, .layers = 3});
  c.widths.pp = 2;
  c.widths.tp = 1;
  c.stage_layers = {1, 1};
  EXPECT_THROW(validate(c), UsageError);
  c.stage_layers = {4, -1};
  EXPECT_THROW(validate(c), UsageError);
  c.stage_layers = {0, 3};  // chunk 0 of an MLP would hold nothing
  EXPECT_THROW(validate(c), UsageError);
  c.stage_layers = {3, 0};  // the head alone is a stage
  EXPECT_NO_THROW(validate(c));
  c.stage_layers = {};
  c.mlp.num_blocks = 1;
  EXPECT_THROW(validate(c), UsageError);
}

}  // namespace
}  // namespace dtsim::train
