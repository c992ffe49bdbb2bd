// The references themselves: accumulation over one micro-batch is plain training, bit for
// bit; accumulation over several micro-batches matches it within fp32 rounding.
#include <gtest/gtest.h>

#include "train/strategies.h"

namespace dtsim::train {
namespace {

TrainConfig small_mlp() {
  TrainConfig c;
  c.mlp = {.input_dim = 8, .hidden_dim = 16, .num_blocks = 2, .output_dim = 4};
  c.global_batch = 16;
  c.steps = 4;
  c.ranks = 1;
  return c;
}

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

}  // namespace
}  // namespace dtsim::train
