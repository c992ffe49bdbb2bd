// The references themselves: accumulation over one micro-batch is plain training, bit for
// bit; accumulation over several micro-batches matches it within fp32 rounding.
#include <gtest/gtest.h>

#include <ostream>
#include <string>

#include "train/strategies.h"
#include "train_test_util.h"

namespace dtsim::train {
namespace {

TrainConfig small_mlp() { return make_config({.batch = 16, .hidden = 16}); }

TEST(Reference, AccumulationOverOneMicroBatchIsPlainTrainingBitwise) {
  TrainConfig c = small_mlp();
  c.strategy = Strategy::kAccum;
  const RunResult accum = run_accum(c);
  const RunResult single = run_single(c);
  const Comparison cmp = compare(accum, single, 0, 0);
  EXPECT_TRUE(cmp.bitwise_equal) << "max abs diff " << cmp.max_abs_diff;
}

TEST(Reference, AccumulationOverFourMicroBatchesMatchesWithinFp32) {
  TrainConfig c = small_mlp();
  c.micro_batches = 4;
  const RunResult accum = run_accum(c);
  const RunResult single = run_single(c);
  const Comparison cmp = compare(accum, single, 1e-5, 1e-6);
  EXPECT_TRUE(cmp.passed) << "max abs diff " << cmp.max_abs_diff << " max loss diff "
                          << cmp.max_loss_diff;
  EXPECT_LT(single.losses.back(), single.losses.front());
}

// run_single applies plain SGD inside backward (TrainConfig::sgd_in_backward); with it off
// the separate optimizer step runs. Both give the same bits, with poisoned gradients too
// (the fused step never reads them); optimizers it does not fuse fall back unchanged.
struct SgdInBackwardCase {
  const char* name;
  ConfigSpec spec;
};

void PrintTo(const SgdInBackwardCase& c, std::ostream* os) { *os << c.name; }

class SgdInBackward : public ::testing::TestWithParam<SgdInBackwardCase> {};

TEST_P(SgdInBackward, SingleRunsTheSameBitsAsTheSeparateStep) {
  TrainConfig fused = make_config(GetParam().spec), separate = fused;
  fused.poison_gradients = true;
  separate.sgd_in_backward = false;
  const RunResult a = run_single(fused), b = run_single(separate);
  const Comparison cmp = compare(a, b, 0, 0);
  EXPECT_TRUE(cmp.bitwise_equal) << "max abs diff " << cmp.max_abs_diff;
  EXPECT_NE(a.losses.back(), a.losses.front());  // the parameters moved
}

INSTANTIATE_TEST_SUITE_P(
    Optimizers, SgdInBackward,
    ::testing::Values(
        SgdInBackwardCase{"Sgd", {.batch = 16, .hidden = 16}},
        SgdInBackwardCase{"SgdThreeBlocks", {.batch = 13, .dim = 20, .layers = 3}},
        SgdInBackwardCase{"SgdMomentum", {.batch = 16, .opt = model::OptimizerKind::kSgdMomentum}},
        SgdInBackwardCase{"Adam", {.batch = 16, .opt = model::OptimizerKind::kAdam}},
        SgdInBackwardCase{"SgdBf16", {.batch = 16, .precision = model::Precision::kMixedBf16}},
        SgdInBackwardCase{"SgdMoe", {.model = ModelKind::kMoe, .batch = 16}}),
    [](const ::testing::TestParamInfo<SgdInBackwardCase>& info) { return info.param.name; });

// validate() names the flag and the constraint in one line.
std::string usage_error(const TrainConfig& c) {
  try {
    validate(c);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(Validate, NamesTheFlagAndTheConstraint) {
  TrainConfig c = small_mlp();
  c.strategy = Strategy::kDdp;
  c.ranks = 4;
  c.global_batch = 30;
  EXPECT_EQ(usage_error(c),
            "--batch 30 is not divisible by --ranks 4 x --micro-batches 1; try --batch 28 or 32");
  c.global_batch = 32;
  c.micro_batches = 3;
  EXPECT_EQ(usage_error(c),
            "--batch 32 is not divisible by --ranks 4 x --micro-batches 3; try --batch 24 or 36");
  c.global_batch = 5;
  EXPECT_EQ(usage_error(c),
            "--batch 5 is not divisible by --ranks 4 x --micro-batches 3; try --batch 12");
  c.global_batch = 32;
  c.micro_batches = 1;
  EXPECT_EQ(usage_error(c), "");
  c.ranks = 0;
  EXPECT_NE(usage_error(c).find("--ranks 0"), std::string::npos);
  c = small_mlp();
  c.mlp.num_blocks = 0;
  EXPECT_NE(usage_error(c).find("--layers 0"), std::string::npos);
  c = small_mlp();
  c.model = ModelKind::kMoe;
  c.moe.moe.top_k = c.moe.moe.num_experts;  // every expert: allowed
  EXPECT_EQ(usage_error(c), "");
  c.moe.moe.top_k = c.moe.moe.num_experts + 1;
  EXPECT_NE(
      usage_error(c).find("--top-k " + std::to_string(c.moe.moe.top_k) + " exceeds --experts"),
      std::string::npos);
  c = small_mlp();
  c.strategy = Strategy::kTp;
  c.ranks = 2;
  c.pitfall = Pitfall::kForgetDivide;
  EXPECT_EQ(usage_error(c),
            "--pitfall forget-divide applies to --strategy ddp, zero1, zero2, zero3");
  c.strategy = Strategy::kZero3;
  EXPECT_EQ(usage_error(c), "");
}

TEST(Validate, RunTrainingDispatchesAndRejects) {
  TrainConfig c = small_mlp();
  c.strategy = Strategy::kZero2;
  c.ranks = 2;
  EXPECT_EQ(run_training(c).ranks.size(), 2u);
  c.global_batch = 15;
  EXPECT_THROW(run_training(c), UsageError);
}

}  // namespace
}  // namespace dtsim::train
