// The GPT's activation memory per rank: what each rank measures (its ledger's peak,
// model::MemoryLedger) against the stated count (model/gpt_memory.h, the gpt spec's
// activation_floats; docs/gpt.md adapts Korthikanti et al. 2022 to it) within 5%, under
// tensor parallelism of width 1, 2 and 4, with and without sequence parallelism, full and
// selective recomputation; and the count's per-layer term in Korthikanti et al.'s form.
#include <gtest/gtest.h>

#include <cmath>
#include <ostream>

#include "model/gpt_memory.h"
#include "train/models/model_spec.h"
#include "train/strategies.h"
#include "train_test_util.h"

namespace dtsim::train {
namespace {

struct MemCase {
  int tp = 2;
  bool sp = false;
  model::Recompute recompute = model::Recompute::kNone;
  int cp = 1;
};
std::ostream& operator<<(std::ostream& os, const MemCase& p) {
  return os << "tp" << p.tp << (p.cp > 1 ? "_cp" + std::to_string(p.cp) : "") << (p.sp ? "_sp" : "")
            << (p.recompute == model::Recompute::kFull        ? "_full"
                : p.recompute == model::Recompute::kSelective ? "_selective"
                                                              : "");
}

// A GPT whose per-layer tensors dominate (S 16, D 32, 4 heads of 8, F 128, 4 layers).
TrainConfig gpt_memory_config(const MemCase& p) {
  TrainConfig c = with_adam(make_config({.strategy = Strategy::kMesh, .steps = 2}));
  c.model = ModelKind::kGpt;
  c.gpt = {.vocab = 9,
           .seq_len = 16,
           .d_model = 32,
           .heads = 4,
           .head_dim = 8,
           .num_layers = 4,
           .mlp_hidden = 128};
  c.global_batch = 8;
  c.widths.tp = p.tp;
  c.widths.cp = p.cp;
  c.ranks = p.tp * p.cp;
  c.sequence_parallel = p.sp;
  c.recompute = p.recompute;
  resolve_preset(c);
  return c;
}

class GptActivations : public ::testing::TestWithParam<MemCase> {};

TEST_P(GptActivations, MeasuredPeakEqualsTheStatedCountWithin5Percent) {
  const TrainConfig c = gpt_memory_config(GetParam());
  const RunResult r = run_training(c);
  const int64_t stated = 4 * model_spec(c).activation_floats(c, c.global_batch, GetParam().tp, 1);
  ASSERT_EQ(r.ranks.size(), size_t(GetParam().tp * GetParam().cp));
  for (const RankReport& rank : r.ranks) {
    const int64_t measured = category(rank, model::MemoryCategory::kActivations);
    std::cout << "[gpt " << GetParam() << "] activations measured " << measured << " B, stated "
              << stated << " B (" << 100.0 * (measured - stated) / stated << "%)\n";
    EXPECT_LE(std::abs(double(measured - stated)), 0.05 * stated)
        << "measured " << measured << " stated " << stated;
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, GptActivations,
                         ::testing::Values(MemCase{1, false}, MemCase{2, false}, MemCase{4, false},
                                           MemCase{2, true}, MemCase{4, true},
                                           MemCase{1, false, model::Recompute::kFull},
                                           MemCase{2, false, model::Recompute::kFull},
                                           MemCase{4, false, model::Recompute::kFull},
                                           MemCase{2, true, model::Recompute::kFull},
                                           MemCase{4, true, model::Recompute::kFull},
                                           MemCase{1, false, model::Recompute::kSelective},
                                           MemCase{2, false, model::Recompute::kSelective},
                                           MemCase{4, true, model::Recompute::kSelective},
                                           MemCase{1, false, model::Recompute::kNone, 2},
                                           MemCase{1, false, model::Recompute::kNone, 4},
                                           MemCase{2, true, model::Recompute::kNone, 2},
                                           MemCase{1, false, model::Recompute::kFull, 2},
                                           MemCase{1, false, model::Recompute::kSelective, 4},
                                           MemCase{2, false, model::Recompute::kFull, 4}),
                         [](const auto& info) { return ::testing::PrintToString(info.param); });

// The count's per-layer term is Korthikanti et al.'s s b h (34 + 5 a s / h) redone in fp32
// floats: 2 s b h (the two blocks' outputs) + 2 s b h (the two norms' outputs, the QKV and
// fc1 inputs) + 4 s b (norm statistics) + s b (4 h + 2 F + a) / t (q, k, v, the attention
// output, the log-sum-exp, gelu and gelu'). Sequence parallelism divides the first and the
// third by t; at t = 1 both forms are the same.
TEST(GptActivations, PerLayerTermIsTheKorthikantiFormInFloats) {
  model::GptConfig g{.vocab = 9,
                     .seq_len = 16,
                     .d_model = 32,
                     .heads = 4,
                     .head_dim = 8,
                     .num_layers = 4,
                     .mlp_hidden = 128};
  const int64_t b = 3, s = g.seq_len, h = g.d_model, a = g.heads, f = g.mlp_hidden;
  for (int t : {1, 2, 4}) {
    for (bool sp : {false, true}) {
      const model::GptActivationFloats got =
          model::gpt_activation_floats(g, {.batch = b, .tp = t, .sequence_parallel = sp});
      const int64_t div = sp && t > 1 ? t : 1;
      const int64_t want =
          2 * s * b * h / div + 2 * s * b * h + 4 * s * b / div + s * b * (4 * h + 2 * f + a) / t;
      EXPECT_EQ(got.per_layer, want) << "t " << t << " sp " << sp;
      EXPECT_EQ(got.layers, g.num_layers * want);
    }
  }
}

}  // namespace
}  // namespace dtsim::train
