// The estimator reproduces the lesson's figures by computation.
#include <gtest/gtest.h>

#include "train/estimate.h"

namespace dtsim::train {
namespace {

using model::MemoryCategory;

double cat(const Estimate& e, MemoryCategory c) { return e.bytes[static_cast<int>(c)]; }

TEST(Estimate, LessonFiguresFor7BOn8Gpus) {
  const Estimate e = estimate({.params = 7e9, .ranks = 8, .zero_stage = 0});
  EXPECT_DOUBLE_EQ(e.static_bytes / 7e9, 16.0) << "2 + 2 + 4 + 4 + 4 bytes per parameter";
  EXPECT_DOUBLE_EQ(cat(e, MemoryCategory::kWeights), 2 * 7e9);
  EXPECT_DOUBLE_EQ(cat(e, MemoryCategory::kMasterWeights), 4 * 7e9);
  EXPECT_DOUBLE_EQ(e.static_bytes / 1e9, 112.0);
  EXPECT_DOUBLE_EQ(e.gradient_bytes / 1e9, 14.0);
  EXPECT_DOUBLE_EQ(e.bytes_sent_per_step / 1e9, 24.5);
}

TEST(Estimate, ZeroStagesShardWhatThePaperSays) {
  const double psi = 7.5e9, n = 64;  // the ZeRO paper's Figure 1
  const auto at = [&](int stage) {
    return estimate({.params = psi, .ranks = 64, .zero_stage = stage}).static_bytes;
  };
  EXPECT_DOUBLE_EQ(at(0), 16 * psi);
  EXPECT_DOUBLE_EQ(at(1), 4 * psi + 12 * psi / n);
  EXPECT_DOUBLE_EQ(at(2), 2 * psi + 14 * psi / n);
  EXPECT_DOUBLE_EQ(at(3), 16 * psi / n);
  EXPECT_NEAR(at(0) / 1e9, 120, 1e-9);
  EXPECT_NEAR(at(3) / 1e9, 1.875, 1e-9);
}

TEST(Estimate, TrafficPerStage) {
  const double psi = 1e6;
  const auto sent = [&](int stage) {
    return estimate({.params = psi, .ranks = 4, .zero_stage = stage}).bytes_sent_per_step;
  };
  const double ddp = 2.0 * 3 / 4 * 2 * psi;
  EXPECT_DOUBLE_EQ(sent(0), ddp);
  EXPECT_DOUBLE_EQ(sent(2), ddp) << "reduce-scatter + all-gather is an all-reduce";
  EXPECT_DOUBLE_EQ(sent(3), 1.5 * ddp);
  EXPECT_DOUBLE_EQ(sent(1), ddp) << "stage 1 reduce-scatters, then all-gathers (ZeRO section 7)";
}

TEST(Estimate, Fp32AndOneRank) {
  const Estimate e = estimate({.params = 100,
                               .ranks = 1,
                               .zero_stage = 3,
                               .precision = model::Precision::kFp32,
                               .optimizer = model::OptimizerKind::kSgd});
  EXPECT_DOUBLE_EQ(e.static_bytes, 800);  // 4 + 4, no master, no state
  EXPECT_DOUBLE_EQ(e.bytes_sent_per_step, 0);
}

TEST(EstimateMesh, ModelStateIsTheStagesSliceShardedAlongDp) {
  // 7B on dp 2 x tp 2 x pp 4: a device holds 7e9 / 8 parameters; ZeRO-1 over dp 2 halves
  // master, m and v: 2 + 2 + 12 / 2 = 10 bytes per parameter of the slice.
  MeshEstimateInput in;
  in.params = 7e9, in.dp = 2, in.tp = 2, in.zero_stage = 1;
  in.schedule = {pipeline::ScheduleKind::kOneFOneB, 4, 8, 1};
  const MeshEstimate m = estimate_mesh(in);
  EXPECT_EQ(m.devices, 16);
  EXPECT_DOUBLE_EQ(m.params_per_device, 7e9 / 8);
  EXPECT_DOUBLE_EQ(m.state.static_bytes, 10 * 7e9 / 8);
  EXPECT_DOUBLE_EQ(m.state.bytes_sent_per_step, 0.5 * (2 + 2) * 7e9 / 8)
      << "reduce-scatter + all-gather over the dp pair, of the slice only";
  // A mesh of one stage and one tp rank is the flat estimate.
  MeshEstimateInput one_stage;
  one_stage.params = 7e9, one_stage.dp = 8, one_stage.zero_stage = 3;
  const MeshEstimate flat = estimate_mesh(one_stage);
  const Estimate e = estimate({.params = 7e9, .ranks = 8, .zero_stage = 3});
  EXPECT_EQ(flat.state.bytes, e.bytes);
  EXPECT_EQ(flat.state.bytes_sent_per_step, e.bytes_sent_per_step);
}

TEST(EstimateMesh, BubbleAndActivationsFollowTheSchedule) {
  MeshEstimateInput in;
  in.params = 1e9, in.activation_bytes = 8e9;
  in.schedule = {pipeline::ScheduleKind::kGpipe, 4, 8, 1};
  MeshEstimate m = estimate_mesh(in);
  EXPECT_EQ(m.bubble, (pipeline::Fraction{3, 11}));
  EXPECT_EQ(m.bubble, m.bubble_formula);
  // GPipe: all 8 micro-batches in flight, each a quarter of A on its stage.
  EXPECT_EQ(m.activation_bytes, (std::vector<double>{16e9, 16e9, 16e9, 16e9}));
  in.schedule.kind = pipeline::ScheduleKind::kOneFOneB;
  m = estimate_mesh(in);
  EXPECT_EQ(m.activation_bytes, (std::vector<double>{8e9, 6e9, 4e9, 2e9}));
  in.schedule = {pipeline::ScheduleKind::kInterleaved, 4, 8, 2};
  m = estimate_mesh(in);
  EXPECT_EQ(m.bubble, (pipeline::Fraction{3, 19}));
  // 11 chunk micro-batches of A/8 on stage 0: more than 1F1B's 4 x A/4.
  EXPECT_DOUBLE_EQ(m.activation_bytes[0], 11 * 1e9);
  // ZB-H1: B frees no activations, W does; stage r keeps 2p - 1 - r until their W.
  in.schedule = {pipeline::ScheduleKind::kZeroBubbleH1, 4, 8, 1};
  m = estimate_mesh(in);
  EXPECT_EQ(m.bubble, (pipeline::Fraction{1, 9}));
  EXPECT_EQ(m.in_flight, (std::vector<int>{4, 3, 2, 1}));
  EXPECT_EQ(m.held, (std::vector<int>{7, 6, 5, 4}));
  EXPECT_EQ(m.activation_bytes, (std::vector<double>{14e9, 12e9, 10e9, 8e9}));
}

TEST(EstimateMesh, HugeSchedulesUseTheFormulaInsteadOfADryRun) {
  MeshEstimateInput in;
  in.params = 1e12;
  in.schedule = {pipeline::ScheduleKind::kInterleaved, 1024, 4096, 64};
  const MeshEstimate m = estimate_mesh(in);  // a dry run would hold 2 GB of timelines
  EXPECT_FALSE(m.dry_run);
  EXPECT_EQ(m.bubble, (pipeline::Fraction{1023, 64 * 4096 + 1023}));
  EXPECT_EQ(m.in_flight.front(), 2 * 1023 + 63 * 1024 + 1);
  in.schedule = {pipeline::ScheduleKind::kOneFOneB, 8, 64, 1};
  EXPECT_TRUE(estimate_mesh(in).dry_run);
}

}  // namespace
}  // namespace dtsim::train
