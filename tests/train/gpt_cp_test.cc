// --model gpt on the context-parallel axis (--cp; model/ring_attention.h): the sequence in 2
// cp chunks per rank, attention as a ring. Each mesh passes the lockstep check against
// single-rank training (alone, with dp, tp + sp, pp and ZeRO-3), one SGD step's gradients
// equal the single rank's, the report's counts are the ring's 2 (N - 1) chunks per attention
// and direction, and the unsupported inputs are one-line errors.
#include <gtest/gtest.h>

#include <ostream>
#include <string>

#include "model/param_layout.h"
#include "train/memory_plan.h"
#include "train/strategies.h"
#include "train_test_util.h"

namespace dtsim::train {
namespace {

struct GptCpCase {
  int dp = 1, tp = 1, cp = 2, pp = 1, zero = 0;
  bool sp = false;
};
std::ostream& operator<<(std::ostream& os, const GptCpCase& p) {
  return os << "dp" << p.dp << "_tp" << p.tp << "_cp" << p.cp << "_pp" << p.pp << "_zero" << p.zero
            << (p.sp ? "_sp" : "");
}

// A small GPT (S 24, V 7, 4 heads, F 32) on the mesh of `p`.
TrainConfig gpt_mesh(const GptCpCase& p, int steps = 3) {
  TrainConfig c = with_adam(small_gpt(24, {.dp = p.dp, .tp = p.tp, .pp = p.pp, .cp = p.cp}, steps));
  c.zero = p.zero;
  c.sequence_parallel = p.sp;
  resolve_preset(c);
  return c;
}

class GptCp : public ::testing::TestWithParam<GptCpCase> {};

TEST_P(GptCp, PassesTheCheckAgainstSingleRankTraining) {
  const TrainConfig c = gpt_mesh(GetParam());
  const CheckResult r = run_and_check(c);
  std::cout << "[gpt " << GetParam() << "] " << r << "\n";
  EXPECT_EQ(r.reference_name, "single");
  EXPECT_TRUE(r.passed) << r;
}

// Under the deterministic algorithms too: ring attention merges partial softmaxes in ring
// order and each rank's loss is the mean of its own tokens, so the run is within tolerance
// of single-rank training, not bitwise accumulation's (whose sums it does not do).
TEST(GptCpDeterministic, PassesTheCheckWithinToleranceOfSingleRankTraining) {
  for (const GptCpCase& p : {GptCpCase{.cp = 2}, GptCpCase{.cp = 4}, GptCpCase{.dp = 2, .cp = 2}}) {
    TrainConfig c = gpt_mesh(p);
    c.algo = Algo::kDeterministic;
    const CheckResult r = run_and_check(c);
    EXPECT_EQ(r.reference_name, "single") << p;
    EXPECT_TRUE(r.passed) << p << ": " << r;
  }
}

// One SGD step at lr 1 moves each parameter by minus its gradient: the context-parallel
// run's against the single rank's, within fp32 tolerance.
TEST_P(GptCp, OneStepGradientsEqualTheSingleRanks) {
  TrainConfig c = gpt_mesh(GetParam(), 1);
  c.optimizer = model::OptimizerKind::kSgd;
  c.lr = 1.0f;
  TrainConfig single = c;
  single.strategy = Strategy::kSingle;
  single.ranks = 1;
  single.widths.dp = single.widths.tp = single.widths.cp = single.widths.pp = 1;
  single.zero = 0;
  single.sequence_parallel = false;
  const model::ParamLayout full = model_layout(c);
  const std::vector<float> p0 = model::init_params(full, c.seed);
  const RunResult a = run_training(c), b = run_training(single);
  ASSERT_EQ(a.params.size(), p0.size());
  ASSERT_EQ(b.params.size(), p0.size());
  double largest = 0;
  for (const model::ParamView& v : full.views()) {
    for (size_t i = v.offset; i < v.offset + v.size(); ++i) {
      const double ga = p0[i] - a.params[i], gb = p0[i] - b.params[i];
      largest = std::max(largest, std::abs(gb));
      ASSERT_NEAR(ga, gb, 1e-5 + 1e-4 * std::abs(gb)) << v.name << " element " << i - v.offset;
    }
  }
  EXPECT_GT(largest, 1e-3);  // the step moved something
}

INSTANTIATE_TEST_SUITE_P(Cases, GptCp,
                         ::testing::Values(GptCpCase{.cp = 2}, GptCpCase{.cp = 3},
                                           GptCpCase{.cp = 4}, GptCpCase{.dp = 2, .cp = 2},
                                           GptCpCase{.tp = 2, .cp = 2, .sp = true},
                                           GptCpCase{.dp = 2, .tp = 2, .cp = 2, .sp = true},
                                           GptCpCase{.dp = 2, .cp = 2, .zero = 3},
                                           GptCpCase{.cp = 2, .pp = 2},
                                           GptCpCase{.tp = 2, .cp = 2, .pp = 2, .sp = true}),
                         [](const auto& info) { return ::testing::PrintToString(info.param); });

// Per attention and micro-batch, each rank sends its K/V block (its 2 chunks of every
// sample: rows B S / N, 2E floats each) N - 1 times forward and N - 1 times backward, and
// the travelling dK/dV partials (the same size) N - 1 times backward: 2 (N - 1) chunks of
// K/V per direction plus 2 (N - 1) of dK/dV, and nothing else point to point.
TEST(GptCpCounts, TheRingSendsTwoChunksNMinusOneTimesPerDirection) {
  for (int n : {2, 3, 4}) {
    TrainConfig c = gpt_mesh({.cp = n}, 2);
    c.micro_batches = 2;
    const RunResult r = run_training(c);
    const int L = c.gpt.num_layers, passes = c.steps * c.micro_batches;
    const int64_t micro = c.global_batch / c.micro_batches, E = c.gpt.heads * c.gpt.head_dim;
    const int64_t chunk_rows = c.gpt.seq_len / (2 * n);
    const uint64_t chunk_bytes = micro * chunk_rows * 2 * E * sizeof(float);  // K and V
    const uint64_t chunks = uint64_t(passes) * L * (2 * (n - 1) + 2 * (n - 1) + 2 * (n - 1));
    ASSERT_EQ(r.ranks.size(), size_t(n));
    for (int rank = 0; rank < n; ++rank) {
      const RankCounters& rc = r.ranks[rank].counters;
      EXPECT_EQ(rc[OpKind::kSend].calls, uint64_t(passes) * L * 3 * (n - 1)) << "cp " << n;
      EXPECT_EQ(rc[OpKind::kSend].bytes_sent, chunks * chunk_bytes) << "cp " << n;
      EXPECT_EQ(rc[OpKind::kRecv].calls, rc[OpKind::kSend].calls);
    }
  }
}

// The memory plan before work (memory_plan.h: the placements' model state plus the spec's
// activation count, ring attention's scratch included) is each rank's measured peak, byte
// for byte, on meshes without pipeline stages (where it bounds the micro-batches in flight).
TEST(GptCpMemory, PlanEqualsEveryRanksMeasuredPeak) {
  for (const GptCpCase& p :
       {GptCpCase{.cp = 2}, GptCpCase{.cp = 4}, GptCpCase{.dp = 2, .tp = 2, .cp = 2, .sp = true},
        GptCpCase{.dp = 2, .cp = 2, .zero = 3}}) {
    const TrainConfig c = gpt_mesh(p, 2);
    const MemoryPlan plan = plan_memory(c);
    const RunResult run = run_training(c);
    ASSERT_EQ(plan.rank_bytes.size(), run.ranks.size()) << p;
    for (size_t r = 0; r < run.ranks.size(); ++r) {
      int64_t measured = 0;
      for (int64_t b : run.ranks[r].memory) measured += b;
      EXPECT_EQ(plan.rank_bytes[r], measured) << p << " rank " << r;
    }
  }
}

void expect_rejected(TrainConfig c, const std::string& flag) {
  try {
    validate(c);
    ADD_FAILURE() << "accepted; expected an error naming " << flag;
  } catch (const UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(flag), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

TEST(GptCpErrors, OneLineErrorsNameTheFlag) {
  TrainConfig mlp = gpt_mesh({.cp = 2});
  mlp.model = ModelKind::kMlp;
  expect_rejected(mlp, "--cp");
  TrainConfig odd = gpt_mesh({.cp = 4});
  odd.gpt.seq_len = 12;  // 2 x 4 does not divide it
  expect_rejected(odd, "--seq");
  TrainConfig sp = gpt_mesh({.tp = 4, .cp = 2, .sp = true});
  sp.gpt.seq_len = 20;  // 20 / 2 = 10 tokens per cp rank, not divisible by tp 4
  expect_rejected(sp, "--seq");
  validate(gpt_mesh({.dp = 2, .tp = 2, .cp = 2, .sp = true}));  // the done-means mesh
}

}  // namespace
}  // namespace dtsim::train
