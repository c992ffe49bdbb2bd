// --model gpt on the tensor-parallel axis (model/gpt_layers.h): heads and MLP hidden units
// split over tp ranks, with and without sequence parallelism, alone and on a dp x tp mesh
// with ZeRO-3. Each case passes the lockstep check against single-rank training, its one-step
// gradients equal the single-rank ones within fp32 tolerance, and the report counts the
// collectives Megatron's split issues per block and step.
#include <gtest/gtest.h>

#include <map>
#include <ostream>
#include <string>

#include "model/param_layout.h"
#include "train/strategies.h"
#include "train_test_util.h"

namespace dtsim::train {
namespace {

struct GptTpCase {
  int dp = 1, tp = 2, zero = 0;
  bool sp = false;
};
std::ostream& operator<<(std::ostream& os, const GptTpCase& p) {
  return os << "dp" << p.dp << "_tp" << p.tp << "_zero" << p.zero << (p.sp ? "_sp" : "");
}

// A small GPT (S 8, V 7, 4 heads, F 32) on the mesh of `p`.
TrainConfig gpt_mesh(const GptTpCase& p, int steps = 3) {
  TrainConfig c = with_adam(small_gpt(8, {.dp = p.dp, .tp = p.tp}, steps));
  c.zero = p.zero;
  c.sequence_parallel = p.sp;
  resolve_preset(c);
  return c;
}

class GptTp : public ::testing::TestWithParam<GptTpCase> {};

TEST_P(GptTp, PassesTheCheckAgainstSingleRankTraining) {
  const TrainConfig c = gpt_mesh(GetParam());
  RunResult run;
  const CheckResult r = run_and_check(c, &run);
  std::cout << "[gpt " << GetParam() << "] " << r << "\n";
  EXPECT_EQ(r.reference_name, "single");
  EXPECT_TRUE(r.passed) << r;
}

// One SGD step at lr 1 moves each parameter by minus its gradient: the tensor-parallel
// run's (assembled by name and shard) against the single rank's, within fp32 tolerance.
TEST_P(GptTp, OneStepGradientsEqualTheSingleRanks) {
  TrainConfig c = gpt_mesh(GetParam(), 1);
  c.optimizer = model::OptimizerKind::kSgd;
  c.lr = 1.0f;
  TrainConfig single = c;
  single.strategy = Strategy::kSingle;
  single.ranks = 1;
  single.widths.dp = single.widths.tp = 1;
  single.zero = 0;
  single.sequence_parallel = false;
  const model::ParamLayout full = model_layout(c);
  const std::vector<float> p0 = model::init_params(full, c.seed);
  const RunResult a = run_training(c), b = run_training(single);
  ASSERT_EQ(a.params.size(), p0.size());
  ASSERT_EQ(b.params.size(), p0.size());
  double worst = 0, largest = 0;
  for (const model::ParamView& v : full.views()) {
    for (size_t i = v.offset; i < v.offset + v.size(); ++i) {
      const double ga = p0[i] - a.params[i], gb = p0[i] - b.params[i];
      largest = std::max(largest, std::abs(gb));
      worst = std::max(worst, std::abs(ga - gb));
      ASSERT_NEAR(ga, gb, 1e-5 + 1e-4 * std::abs(gb)) << v.name << " element " << i - v.offset;
    }
  }
  EXPECT_GT(largest, 1e-3);  // the step moved something
  std::cout << "[gpt " << GetParam() << "] max |grad - single's| " << worst << " (largest grad "
            << largest << ")\n";
}

INSTANTIATE_TEST_SUITE_P(Cases, GptTp,
                         ::testing::Values(GptTpCase{1, 2, 0, false}, GptTpCase{1, 4, 0, false},
                                           GptTpCase{2, 2, 3, false}, GptTpCase{1, 2, 0, true},
                                           GptTpCase{1, 4, 0, true}, GptTpCase{2, 2, 3, true}),
                         [](const auto& info) { return ::testing::PrintToString(info.param); });

// The bytes each traced call of `name` sent on rank `rank`, call by call.
std::vector<uint64_t> call_bytes(const RunResult& r, const std::string& name, int rank) {
  std::vector<uint64_t> out;
  for (const PhaseEvent& e : r.ranks[rank].timeline) {
    if (e.name == name) out.push_back(e.bytes);
  }
  return out;
}

// Per block and micro-batch, tensor parallelism all-reduces the attention's and the MLP's
// output in forward and their norms' input gradients in backward: 2 + 2. Sequence
// parallelism puts an all-gather and a reduce-scatter in the place of each (the same bytes
// under ring algorithms: each moves (T - 1) / T of the tensor, an all-reduce twice that),
// plus one all-gather of the sequence before the final norm and all-reduces of the
// sequence-sharded gradients (each block's two norms, the embedding).
TEST(GptTpCollectives, FourAllReducesPerBlockAndTheirSequenceParallelEquivalent) {
  for (int tp : {2, 4}) {
    TrainConfig c = gpt_mesh({1, tp, 0, false}, 2);
    c.micro_batches = 2;
    c.algo = Algo::kRing;
    c.trace = true;
    TrainConfig s = c;
    s.sequence_parallel = true;
    const RunResult r = run_training(c), q = run_training(s);
    const int L = c.gpt.num_layers, passes = c.steps * c.micro_batches;
    const int64_t micro = c.global_batch / c.micro_batches;  // samples per pass
    const int64_t act = micro * c.gpt.seq_len * c.gpt.d_model * int64_t(sizeof(float));
    const uint64_t ring_ar = 2 * act * (tp - 1) / tp, ring_half = act * (tp - 1) / tp;
    for (int rank = 0; rank < tp; ++rank) {
      const RankCounters& tc = r.ranks[rank].counters;
      EXPECT_EQ(tc[OpKind::kAllReduce].calls, uint64_t(passes * 4 * L)) << "tp " << tp;
      EXPECT_EQ(tc.total().calls, tc[OpKind::kAllReduce].calls);
      for (uint64_t b : call_bytes(r, "all_reduce", rank)) EXPECT_EQ(b, ring_ar);

      const RankCounters& sc = q.ranks[rank].counters;
      EXPECT_EQ(sc[OpKind::kAllGather].calls, uint64_t(passes * (4 * L + 1))) << "tp " << tp;
      EXPECT_EQ(sc[OpKind::kReduceScatter].calls, uint64_t(passes * 4 * L));
      EXPECT_EQ(sc[OpKind::kAllReduce].calls, uint64_t(passes * (2 * L + 1)));
      for (uint64_t b : call_bytes(q, "all_gather", rank)) EXPECT_EQ(b, ring_half);
      for (uint64_t b : call_bytes(q, "reduce_scatter", rank)) EXPECT_EQ(b, ring_half);
      // The blocks' all-gathers and reduce-scatters move what TP's all-reduces move.
      EXPECT_EQ(sc[OpKind::kAllGather].bytes_sent + sc[OpKind::kReduceScatter].bytes_sent -
                    passes * ring_half,
                tc[OpKind::kAllReduce].bytes_sent);
      // The rest: 2 D floats per norm, (V + S) D for the embedding, ring all-reduced.
      const int64_t D = c.gpt.d_model,
                    grads = passes * (2 * L * 2 * D + (c.gpt.vocab + c.gpt.seq_len) * D);
      EXPECT_NEAR(double(sc[OpKind::kAllReduce].bytes_sent),
                  2.0 * grads * sizeof(float) * (tp - 1) / tp, 8.0 * passes * (2 * L + 1))
          << "tp " << tp;
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

TEST(GptTpValidation, NamesTheFlagThatDoesNotDivideOrIsMissing) {
  TrainConfig c = gpt_mesh({1, 4, 0, false});
  c.gpt.heads = 6;
  expect_rejected(c, "--heads 6");
  c = gpt_mesh({1, 4, 0, false});
  c.gpt.mlp_hidden = 30;
  expect_rejected(c, "--hidden 30");
  c = gpt_mesh({1, 4, 0, true});
  c.gpt.seq_len = 6;
  expect_rejected(c, "--seq 6");
  c = gpt_mesh({2, 1, 0, false});
  c.sequence_parallel = true;
  expect_rejected(c, "--sequence-parallel");
  c = make_config({.strategy = Strategy::kTp, .ranks = 2});
  c.sequence_parallel = true;
  expect_rejected(c, "--sequence-parallel");
}

}  // namespace
}  // namespace dtsim::train
