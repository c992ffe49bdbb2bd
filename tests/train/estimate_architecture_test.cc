// Parameter counts, FLOPs and Korthikanti et al. 2022's activation formulas, checked against
// the published figures and the paper's closed forms.
#include <gtest/gtest.h>

#include "train/estimate/activations.h"
#include "train/estimate/architecture.h"

namespace dtsim::train::estimator {
namespace {

Architecture preset(const char* name) {
  Architecture a;
  a.gpt = find_preset(name)->shape;
  return a;
}

TEST(EstimateArchitecture, PresetsHaveTheirPublishedParameterCounts) {
  // GPT-3 "175.0B" (Brown et al. Table 2.1); LLaMA 6.7B (Touvron et al. Table 2); Llama 2 70B
  // (69.0B in the released checkpoint).
  EXPECT_NEAR(count_params(preset("gpt3-175b")).total() / 1e9, 175.0, 0.5);
  EXPECT_NEAR(count_params(preset("llama-7b")).total() / 1e9, 6.74, 0.01);
  EXPECT_NEAR(count_params(preset("llama-70b")).total() / 1e9, 68.98, 0.01);
  EXPECT_EQ(find_preset("llama-8b"), nullptr);
}

TEST(EstimateArchitecture, GptLayerIsTwelveHSquaredPlusBiasesAndNorms) {
  Architecture a;
  a.gpt = {.layers = 2, .hidden = 64, .heads = 4, .vocab = 100, .seq = 16};
  const ParamCounts p = count_params(a);
  const double h = 64;
  EXPECT_DOUBLE_EQ(p.per_layer, 12 * h * h + 13 * h);  // Narayanan et al.: 12 l h^2 + 13 l h
  EXPECT_DOUBLE_EQ(p.embedding, 100 * h + 16 * h);
  EXPECT_DOUBLE_EQ(p.total(), 2 * p.per_layer + p.embedding + 2 * h);
}

TEST(EstimateArchitecture, ForwardFlopsAreNarayananEquationThreeOverFour) {
  // Equation 3 counts 4 passes of the layers (recomputation) and 3 of the logits:
  // 96 B s l h^2 (1 + s/6h + V/16lh); the forward pass is 24 B s l h^2 (1 + s/6h) + 2 B s h V.
  Architecture a;
  a.gpt = {.layers = 24, .hidden = 2304, .heads = 24, .vocab = 51200, .seq = 2048};
  const double B = 8, s = 2048, l = 24, h = 2304, V = 51200;
  const Flops f = forward_flops(a, B * s);
  EXPECT_NEAR(f.layers / (24 * B * s * l * h * h * (1 + s / (6 * h))), 1, 1e-12);
  EXPECT_DOUBLE_EQ(f.logits, 2 * B * s * h * V);
  EXPECT_NEAR((4 * f.layers + 3 * f.logits) /
                  (96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))),
              1, 1e-12);
}

TEST(EstimateActivations, KorthikantiClosedFormsForEveryVariant) {
  GptShape g = find_preset("gpt3-175b")->shape;
  const double s = g.seq, b = 2, h = g.hidden, a = g.heads, t = 8;
  auto bytes = [&](int tp, bool sp, Recompute r) {
    return gpt_layer_activations(g, {tp, sp, r, 2, true}).total();
  };
  EXPECT_DOUBLE_EQ(bytes(1, false, Recompute::kNone), s * b * h * (34 + 5 * a * s / h));
  EXPECT_DOUBLE_EQ(bytes(8, false, Recompute::kNone),
                   s * b * h * (10 + 24 / t + 5 * a * s / (h * t)));
  EXPECT_DOUBLE_EQ(bytes(8, true, Recompute::kNone), s * b * h / t * (34 + 5 * a * s / h));
  EXPECT_DOUBLE_EQ(bytes(8, true, Recompute::kSelective), s * b * h / t * 34);
  EXPECT_DOUBLE_EQ(bytes(8, false, Recompute::kSelective), s * b * h * (10 + 24 / t));
  EXPECT_DOUBLE_EQ(bytes(8, false, Recompute::kFull), 2 * s * b * h);
  EXPECT_DOUBLE_EQ(bytes(8, true, Recompute::kFull), 2 * s * b * h / t);
  // The whole model under sequence parallelism and selective recomputation: L layers of
  // 34 s b h / t and the embedding's dropout mask, s b h / t.
  Architecture arch;
  arch.gpt = g;
  const double whole = micro_batch_activations(arch, {8, true, Recompute::kSelective, 2, true});
  EXPECT_DOUBLE_EQ(whole, g.layers * 34 * s * b * h / t + s * b * h / t);
}

TEST(EstimateActivations, LlamaShapeCountsWhatItSaves) {
  // No dropout, grouped-query K/V, a SwiGLU MLP: per token 4h + 2h + 2h (norms, inputs),
  // Q 2h, K and V 2 x 2 kv d, output projection input 2h, MLP 3 x 2f; scores 2 a s.
  const GptShape g = find_preset("llama-70b")->shape;
  const double s = g.seq, h = g.hidden, kvd = 8 * 128, f = g.ffn;
  const double expect = s * (8 * h + 4 * h + 4 * kvd + 6 * f + 2.0 * g.heads * s);
  EXPECT_DOUBLE_EQ(gpt_layer_activations(g, {1, false, Recompute::kNone, 1, false}).total(),
                   expect);
}

}  // namespace
}  // namespace dtsim::train::estimator
