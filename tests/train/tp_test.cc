// Tensor parallel (Megatron MLP): the sharded blocks against MlpModel layer by layer (slices of
// the reference's weights copied in, outputs and every gradient compared), then whole training
// against single-rank training, collective counts, memory per rank and the trace.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <vector>

#include "model/data.h"
#include "model/layer_stack.h"
#include "model/mlp.h"
#include "runtime/world.h"
#include "train/strategies.h"
#include "train/tensor_parallel/tp_mlp_block.h"
#include "train_test_util.h"

namespace dtsim::train {
namespace {

// fp32: rtol 1e-5 (reassociated sums only); bf16: kBf16Rtol / kBf16Atol from
// train_test_util.h, two bf16 rounding steps, since a reassociated fp32 sum can round a
// gradient or weight to the neighbouring bf16 value.
const double kRtol = kFp32Rtol, kAtol = kFp32Atol;

model::MlpConfig small_mlp() {
  return {.input_dim = 8, .hidden_dim = 16, .num_blocks = 3, .output_dim = 4};
}

void expect_close(std::span<const float> got, std::span<const float> want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], kAtol + kRtol * std::abs(want[i])) << what << " element " << i;
  }
}

class TpLayer : public ::testing::TestWithParam<int> {};

// Picotron-style: copy the reference's weights into the shards, run the same batch, and
// compare the outputs and every gradient (each shard's slice of the full gradient).
TEST_P(TpLayer, ShardsMatchTheReferenceMlpOutputsAndEveryGradient) {
  const int T = GetParam(), B = 12;
  const model::MlpConfig c = small_mlp();
  model::MlpModel ref(c, /*seed=*/5);
  const model::RegressionTask task(c.input_dim, c.output_dim, /*seed=*/6);
  std::vector<float> x(B * c.input_dim), y(B * c.output_dim), want_out(B * c.output_dim);
  task.batch(0, 0, B, x, y);
  ref.forward(x, B, want_out);
  const float want_loss = ref.forward_backward(x, y, B);
  const std::vector<float> full_params(ref.params().begin(), ref.params().end());
  const std::vector<float> full_grads(ref.grads().begin(), ref.grads().end());

  std::vector<std::vector<float>> out(T), grads(T, std::vector<float>(full_grads.size(), NAN));
  std::vector<float> loss(T);
  World world(T);
  world.run([&](Communicator& comm) {
    RankTimeline timeline(nullptr);
    TracedComm tp(comm, timeline);
    model::LayerStack shard(tp_mlp_layers(c, comm.rank(), T, &tp), model::Precision::kFp32);
    const std::vector<model::ParamSlice> slices =
        model::slices_into(shard.layout(), model::mlp_layout(c));
    std::vector<float> mine(shard.layout().size());
    for (const model::ParamSlice& s : slices) {
      std::copy_n(full_params.begin() + s.full, s.count, mine.begin() + s.local);
    }
    shard.store().set_params(mine);
    std::span<const float> o = shard.forward(0, x, B);
    out[comm.rank()].assign(o.begin(), o.end());
    model::MseLoss mse(c.output_dim);
    std::span<const float> pred = shard.forward(0, x, B);
    std::span<float> dy = shard.loss_grad(B);
    loss[comm.rank()] = mse.forward_backward(pred, {.values = y, .labels = {}}, B, 1.0f / B, dy);
    shard.backward(0, dy, {1.0f / B, B});
    for (const model::ParamSlice& s : slices) {
      std::copy_n(shard.store().grads().begin() + s.local, s.count,
                  grads[comm.rank()].begin() + s.full);
    }
  });
  for (int r = 0; r < T; ++r) {
    SCOPED_TRACE("tp rank " + std::to_string(r));
    expect_close(out[r], want_out, "output");
    EXPECT_NEAR(loss[r], want_loss, kRtol * want_loss);
    // Each rank's slices of the full gradient (NaN elsewhere) match the reference's.
    std::vector<float> want = full_grads;
    for (size_t i = 0; i < want.size(); ++i) {
      if (std::isnan(grads[r][i])) grads[r][i] = want[i] = 0;
    }
    expect_close(grads[r], want, "gradient");
    // forward: L all_reduces; forward_backward: L forward + (L - 1) backward.
    EXPECT_EQ(world.counters(r)[OpKind::kAllReduce].calls, uint64_t(3 * c.num_blocks - 1));
  }
  // Together the shards cover every gradient element.
  size_t covered = 0;
  for (size_t i = 0; i < full_grads.size(); ++i) {
    covered += std::any_of(grads.begin(), grads.end(), [&](auto& g) { return g[i] != 0; }) ||
               full_grads[i] == 0;
  }
  EXPECT_EQ(covered, full_grads.size());
}

INSTANTIATE_TEST_SUITE_P(Widths, TpLayer, ::testing::Values(1, 2, 4, 8),
                         [](const auto& info) { return "tp" + std::to_string(info.param); });

TrainConfig tp_config(int ranks, model::OptimizerKind opt, model::Precision precision) {
  return make_config({.strategy = Strategy::kTp,
                      .ranks = ranks,
                      .steps = 8,
                      .batch = 16,
                      .opt = opt,
                      .precision = precision,
                      .dim = 16,
                      .hidden = 32});
}

struct TpCase {
  int ranks;
  model::OptimizerKind opt;
  model::Precision precision;
};
// The case's test name (and how gtest prints it): "ranks4_adam_bf16".
std::ostream& operator<<(std::ostream& os, const TpCase& p) {
  return os << "ranks" << p.ranks << "_" << opt_name(p.opt) << "_" << precision_name(p.precision);
}

class TpTraining : public ::testing::TestWithParam<TpCase> {};

TEST_P(TpTraining, MatchesSingleRankTrainingAfterKSteps) {
  const TpCase p = GetParam();
  const TrainConfig c = tp_config(p.ranks, p.opt, p.precision);
  RunResult tp;
  const CheckResult r = run_and_check(c, &tp);  // train/check.h: vs single
  std::cout << "[tp N=" << p.ranks << (p.opt == model::OptimizerKind::kAdam ? " adam" : " sgd")
            << (p.precision == model::Precision::kMixedBf16 ? " bf16" : " fp32") << "] " << r
            << "\n";
  EXPECT_EQ(r.reference_name, "single");
  EXPECT_TRUE(r.passed) << r;
  EXPECT_LT(tp.losses.back(), tp.losses.front());
  // Per step: L all_reduces forward and L - 1 backward; nothing for the replicated head. At
  // width 1 the layers are the plain ones (f and g are the identity): nothing at all.
  const int per_step = p.ranks == 1 ? 0 : 2 * c.mlp.num_blocks - 1;
  for (const RankReport& r : tp.ranks) {
    EXPECT_EQ(r.counters[OpKind::kAllReduce].calls, uint64_t(c.steps * per_step));
    EXPECT_EQ(r.counters.total().calls, r.counters[OpKind::kAllReduce].calls);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, TpTraining,
    ::testing::Values(TpCase{2, model::OptimizerKind::kSgd, model::Precision::kFp32},
                      TpCase{4, model::OptimizerKind::kAdam, model::Precision::kFp32},
                      TpCase{4, model::OptimizerKind::kSgd, model::Precision::kFp32},
                      TpCase{2, model::OptimizerKind::kAdam, model::Precision::kMixedBf16},
                      TpCase{4, model::OptimizerKind::kSgd, model::Precision::kMixedBf16},
                      TpCase{1, model::OptimizerKind::kAdam, model::Precision::kFp32},
                      TpCase{8, model::OptimizerKind::kAdam, model::Precision::kFp32}),
    [](const auto& info) { return ::testing::PrintToString(info.param); });

TEST(TpAccounting, EachRankHoldsOneTthOfTheBlocksAndTheWholeHead) {
  TrainConfig c = tp_config(4, model::OptimizerKind::kAdam, model::Precision::kMixedBf16);
  c.steps = 2;
  c.trace = true;
  const RunResult r = run_training(c);
  const model::MlpConfig& m = c.mlp;
  const int64_t block = int64_t(2) * m.hidden_dim * m.input_dim + m.hidden_dim + m.input_dim;
  const int64_t b2 = m.input_dim, head = int64_t(m.output_dim) * m.input_dim + m.output_dim;
  // Per rank: 1/T of W1, b1, W2 (b2 is replicated) plus the head.
  const int64_t local = m.num_blocks * ((block - b2) / c.ranks + b2) + head;
  for (const RankReport& rep : r.ranks) {
    using model::MemoryCategory;
    EXPECT_EQ(rep.memory[int(MemoryCategory::kWeights)], 2 * local);  // bf16
    EXPECT_EQ(rep.memory[int(MemoryCategory::kGradients)], 2 * local);
    EXPECT_EQ(rep.memory[int(MemoryCategory::kMasterWeights)], 4 * local);
    EXPECT_EQ(rep.memory[int(MemoryCategory::kAdamM)], 4 * local);
    EXPECT_EQ(rep.memory[int(MemoryCategory::kAdamV)], 4 * local);
    // Traffic: each all_reduce moves B x D fp32 activations.
    EXPECT_GT(rep.counters[OpKind::kAllReduce].bytes_sent, 0u);
    // Trace: the three phases and every collective, with the bytes it sent.
    int fwd = 0, bwd = 0, opt = 0, ar = 0;
    uint64_t bytes = 0;
    for (const PhaseEvent& e : rep.timeline) {
      fwd += e.name == "forward";
      bwd += e.name == "backward";
      opt += e.name == "optimizer";
      if (e.name == "all_reduce") ++ar, bytes += e.bytes;
    }
    EXPECT_EQ(fwd, c.steps);
    EXPECT_EQ(bwd, c.steps);
    EXPECT_EQ(opt, c.steps);
    EXPECT_EQ(ar, c.steps * (2 * m.num_blocks - 1));
    EXPECT_EQ(bytes, rep.counters[OpKind::kAllReduce].bytes_sent);
  }
  EXPECT_GT(r.seconds_per_step, 0);
  EXPECT_EQ(r.params.size(), model::mlp_layout(m).size());
}

TEST(TpValidation, RejectsAHiddenWidthTheRanksDoNotDivideAndTheMoeModel) {
  TrainConfig c = tp_config(4, model::OptimizerKind::kSgd, model::Precision::kFp32);
  c.mlp.hidden_dim = 30;
  try {
    validate(c);
    FAIL() << "hidden 30 over 4 ranks must be rejected";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--hidden 30 is not divisible by the tensor-parallel "
                                         "width 4"),
              std::string::npos)
        << e.what();
  }
  c = tp_config(2, model::OptimizerKind::kSgd, model::Precision::kFp32);
  c.model = ModelKind::kMoe;
  EXPECT_THROW(validate(c), UsageError);
}

}  // namespace
}  // namespace dtsim::train
