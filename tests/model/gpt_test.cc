// The tiny GPT: every layer's backward against finite differences (embedding, attention
// block, MLP block, final norm, LM head), the whole model's gradient of the next-token loss,
// and single-rank training on the reversal task (loss falls, held-out accuracy well above
// chance).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "model/gpt_layers.h"
#include "model/gpt_model.h"
#include "model/mlp_layers.h"
#include "model/optimizer.h"
#include "model/sequence_task.h"
#include "tests/model/grad_check.h"

namespace dtsim::model {
namespace {

using testing::check_gradient;
using testing::random_vector;

constexpr int kSeq = 7, kDim = 8, kBatch = 2;

ParamLayout layout_of_one(const Layer& layer) {
  ParamLayout layout;
  layer.add_params(layout);
  return layout;
}

// One layer's parameter and input gradients against central differences of the probe loss
// sum(y ⊙ w). `input_grad`: also check dx (not for the embedding, whose input is ids).
void check_layer(Layer& layer, std::vector<float> x, bool input_grad, double atol = 2e-4,
                 double rtol = 2e-2) {
  const ParamLayout layout = layout_of_one(layer);
  std::vector<float> params = random_vector(layout.size(), 21, 0.5f);
  const auto w = random_vector(size_t(kBatch) * layer.out_dim(), 22);
  MemoryLedger ledger;
  Workspace ws(&ledger);
  auto state = layer.make_state(&ledger);
  std::vector<float> y(w.size());
  auto loss = [&] {
    layer.forward(params, x, kBatch, y, *state, ws);
    return testing::dot(y, w);
  };
  loss();
  std::vector<float> grads(layout.size(), 0.0f), dx(x.size(), 0.0f);
  layer.backward(params, x, w, {1.0f, kBatch}, grads,
                 input_grad ? std::span<float>(dx) : std::span<float>(), *state, ws);
  EXPECT_GRAD_OK(check_gradient(params, grads, loss, 1e-2f, atol, rtol));
  if (input_grad) EXPECT_GRAD_OK(check_gradient(x, dx, loss, 1e-2f, atol, rtol));
}

TEST(GptLayers, EmbeddingBackwardMatchesFiniteDifferences) {
  TokenEmbedding e("embed", 5, kSeq, kDim);
  std::vector<float> ids(kBatch * kSeq);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = float((i * 3) % 5);
  check_layer(e, ids, false);
}

TEST(GptLayers, AttentionBlockBackwardMatchesFiniteDifferences) {
  AttentionBlock a("attn", kSeq, kDim, 2, 3);  // H hs = 6 != D
  check_layer(a, random_vector(kBatch * kSeq * kDim, 23), true);
}

TEST(GptLayers, MlpBlockBackwardMatchesFiniteDifferences) {
  GptMlpBlock m("mlp", kSeq, kDim, 12);
  check_layer(m, random_vector(kBatch * kSeq * kDim, 24), true);
}

TEST(GptLayers, LayerNormBackwardMatchesFiniteDifferences) {
  LayerNormLayer n("lnf", kSeq, kDim);
  check_layer(n, random_vector(kBatch * kSeq * kDim, 25), true);
}

TEST(GptLayers, LmHeadBackwardMatchesFiniteDifferences) {
  PerToken head(std::make_unique<Linear>("head", kDim, 5), kSeq);
  check_layer(head, random_vector(kBatch * kSeq * kDim, 26), true);
}

// The attention block is causal: perturbing token t's input changes no output before t.
TEST(GptLayers, AttentionBlockIsCausal) {
  AttentionBlock a("attn", kSeq, kDim, 2, 4);
  const ParamLayout layout = layout_of_one(a);
  const auto params = random_vector(layout.size(), 27, 0.5f);
  auto x = random_vector(kSeq * kDim, 28);
  MemoryLedger ledger;
  Workspace ws(&ledger);
  auto state = a.make_state(&ledger);
  std::vector<float> y0(x.size()), y1(x.size());
  a.forward(params, x, 1, y0, *state, ws);
  const int t = 4;
  x[t * kDim + 1] += 0.5f;
  a.forward(params, x, 1, y1, *state, ws);
  for (int i = 0; i < t * kDim; ++i) EXPECT_EQ(y0[i], y1[i]) << i;
  bool changed = false;
  for (int i = t * kDim; i < (t + 1) * kDim; ++i) changed |= y0[i] != y1[i];
  EXPECT_TRUE(changed);
}

const GptConfig kSmall{.vocab = 5,
                       .seq_len = 6,
                       .d_model = 8,
                       .heads = 2,
                       .head_dim = 4,
                       .num_layers = 2,
                       .mlp_hidden = 12};

// The whole model's gradient of the mean next-token cross-entropy (computed here in double
// from the logits) against central differences, every parameter.
TEST(GptModel, GradientMatchesFiniteDifferences) {
  GptModel model(kSmall, 5);
  const int B = 2, S = kSmall.seq_len, V = kSmall.vocab;
  std::vector<float> tokens(B * S);
  std::vector<int32_t> labels(B * S);
  for (int i = 0; i < B * S; ++i) {
    tokens[i] = float((i * 7 + 1) % V);
    labels[i] = (i * 3 + 2) % V;
  }
  auto loss = [&] {
    std::span<const float> logits = model.forward(tokens, B);
    double sum = 0;
    for (int r = 0; r < B * S; ++r) {
      const float* row = logits.data() + size_t(r) * V;
      double mx = row[0], z = 0;
      for (int v = 1; v < V; ++v) mx = std::max(mx, double(row[v]));
      for (int v = 0; v < V; ++v) z += std::exp(row[v] - mx);
      sum += mx + std::log(z) - row[labels[r]];
    }
    return sum / (B * S);
  };
  model.zero_grad();
  const float got = model.forward_backward(tokens, labels, B, 1.0f / B);
  EXPECT_NEAR(got, loss(), 1e-5);
  const std::vector<float> analytic(model.grads().begin(), model.grads().end());
  EXPECT_GRAD_OK(check_gradient(model.params(), analytic, loss, 1e-2f, 2e-4, 3e-2));
}

// The GPT on a LayerStack as train/ runs models: full and selective recomputation give the
// gradients without it, bit for bit, and two stages cut from the layer list and chained by
// hand (as a pipeline passes the activation and its gradient) give the whole model's.
TEST(GptModel, RecomputeAndStagesGiveTheWholeModelsGradientsBitwise) {
  const int B = 3, S = kSmall.seq_len;
  const ReverseTask task(3, 4, 1);
  ASSERT_EQ(task.seq_len(), S);
  std::vector<float> tokens(B * S);
  std::vector<int32_t> labels(B * S);
  task.batch(0, 0, B, tokens, labels);
  const std::vector<float> init = init_params(gpt_layout(kSmall), 9);
  CrossEntropyLoss ce(kSmall.vocab, nullptr, S);
  auto grads_of = [&](std::vector<std::unique_ptr<LayerStack>>& stages) {
    size_t at = 0;
    for (auto& st : stages) {
      std::vector<float> mine(init.begin() + at, init.begin() + at + st->layout().size());
      at += mine.size();
      st->store().set_params(mine);
      st->store().zero_grad();
    }
    std::vector<std::span<const float>> ins{tokens};
    for (auto& st : stages) ins.push_back(st->forward(0, ins.back(), B));
    std::span<float> dy = stages.back()->loss_grad(B);
    ce.forward_backward(ins.back(), {.values = {}, .labels = labels}, B, 1.0f / B, dy);
    std::vector<float> d(dy.begin(), dy.end());
    for (int i = int(stages.size()) - 1; i >= 0; --i) {
      std::span<const float> dx = stages[i]->backward(0, d, {1.0f / B, B}, nullptr, i > 0);
      d.assign(dx.begin(), dx.end());
    }
    std::vector<float> g;
    for (auto& st : stages)
      g.insert(g.end(), st->store().grads().begin(), st->store().grads().end());
    return g;
  };
  auto cut = [&](int at, Recompute r) {
    Layers all = gpt_layers(kSmall), first, second;
    for (int i = 0; i < int(all.size()); ++i)
      (i < at ? first : second).push_back(std::move(all[i]));
    std::vector<std::unique_ptr<LayerStack>> stages;
    if (!first.empty())
      stages.push_back(std::make_unique<LayerStack>(std::move(first), Precision::kFp32, true, r));
    stages.push_back(std::make_unique<LayerStack>(std::move(second), Precision::kFp32, true, r));
    return stages;
  };
  auto whole = cut(0, Recompute::kNone);
  const std::vector<float> want = grads_of(whole);
  auto full = cut(0, Recompute::kFull);
  EXPECT_EQ(grads_of(full), want);
  auto selective = cut(0, Recompute::kSelective);  // the attention output and gelu rebuilt
  EXPECT_EQ(grads_of(selective), want);
  EXPECT_EQ(grads_of(selective), want);  // a second pass reuses the released states
  for (int at : {1, 3, 4, 6}) {
    auto stages = cut(at, Recompute::kNone);
    EXPECT_EQ(grads_of(stages), want) << "cut before layer " << at;
  }
}

// Single rank, 300 Adam steps of fresh samples: the loss falls and the held-out accuracy on
// the answer positions rises far above chance (1/K).
TEST(GptModel, LearnsToReverseSequences) {
  const ReverseTask task(/*length=*/5, /*symbols=*/8, /*seed=*/11);
  const GptConfig c{.vocab = task.vocab(),
                    .seq_len = task.seq_len(),
                    .d_model = 32,
                    .heads = 2,
                    .head_dim = 16,
                    .num_layers = 2,
                    .mlp_hidden = 64};
  GptModel model(c, 3);
  Adam adam({.lr = 3e-3f}, model.layout().size());
  const int B = 32, S = c.seq_len, steps = 300;
  std::vector<float> tokens(B * S);
  std::vector<int32_t> labels(B * S);
  auto accuracy = [&] { return heldout_accuracy(model.stack(), task, 256); };
  const float acc0 = accuracy();
  float first = 0, last = 0;
  for (int s = 0; s < steps; ++s) {
    task.batch(s, 0, B, tokens, labels);
    model.zero_grad();
    const float loss = model.forward_backward(tokens, labels, B, 1.0f / B);
    adam.step(model.params(), model.grads());
    if (s < 10) first += loss / 10;
    if (s >= steps - 10) last += loss / 10;
  }
  const float acc = accuracy();
  std::printf("reverse: loss %.3f -> %.3f, held-out answer accuracy %.3f -> %.3f (chance %.3f)\n",
              first, last, acc0, acc, 1.0 / 8);
  EXPECT_LT(last, 0.7f * first);
  EXPECT_GT(acc, 0.6f);
}

}  // namespace
}  // namespace dtsim::model
