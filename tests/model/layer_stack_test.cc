// LayerStack, the per-layer model API a pipeline runs on: stages cut from one model chain
// back into it bit for bit, several micro-batches can be in flight on one stack, and the
// activation memory of a stage is measured per pass beside its formula.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "model/data.h"
#include "model/layer_stack.h"
#include "model/mlp.h"
#include "model/mlp_layers.h"
#include "tests/model/grad_check.h"

namespace dtsim::model {
namespace {

using testing::random_vector;

const MlpConfig kConfig{.input_dim = 6, .hidden_dim = 10, .num_blocks = 4, .output_dim = 3};
constexpr int kBatch = 5;

bool bitwise_equal(std::span<const float> a, std::span<const float> b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::bit_cast<uint32_t>(a[i]) != std::bit_cast<uint32_t>(b[i])) return false;
  }
  return true;
}

// A stack of layers [first, last) with the whole model's seeded weights.
std::unique_ptr<LayerStack> stage(int first, int last) {
  auto s = std::make_unique<LayerStack>(mlp_layers(kConfig, first, last), Precision::kFp32);
  const ParamLayout full = mlp_layout(kConfig);
  const std::vector<float> init = init_params(full, 3);
  std::vector<float> mine(s->layout().size());
  for (const ParamSlice& sl : slices_into(s->layout(), full)) {
    std::copy_n(init.begin() + sl.full, sl.count, mine.begin() + sl.local);
  }
  s->store().set_params(mine);
  return s;
}

struct Cut {
  int at;  // the first stage holds layers [0, at), the second [at, L + 1)
};

class StageCut : public ::testing::TestWithParam<Cut> {};

// Two stages chained by hand (the activation and its gradient passed between them as a
// pipeline sends them) give the whole model's loss and gradients, bit for bit.
TEST_P(StageCut, TwoStagesChainedEqualTheWholeModelBitwise) {
  const int at = GetParam().at, L = kConfig.num_blocks;
  MlpModel whole(kConfig, 3);
  const auto x = random_vector(kBatch * kConfig.input_dim, 1);
  const auto t = random_vector(kBatch * kConfig.output_dim, 2);
  const float want = whole.forward_backward(x, t, kBatch, 0.25f);

  auto first = stage(0, at), second = stage(at, L + 1);
  std::span<const float> h = first->forward(0, x, kBatch);
  const std::vector<float> sent(h.begin(), h.end());  // "send" the activation
  std::span<const float> y = second->forward(0, sent, kBatch);
  MseLoss mse(kConfig.output_dim);
  std::span<float> dy = second->loss_grad(kBatch);
  const float got = mse.forward_backward(y, {.values = t, .labels = {}}, kBatch, 0.25f, dy);
  std::span<const float> dh = second->backward(0, dy, {0.25f, kBatch}, nullptr, true);
  std::vector<float> received(dh.begin(), dh.end());  // "send" its gradient back
  EXPECT_TRUE(first->backward(0, received, {0.25f, kBatch}).empty());

  EXPECT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want));
  const size_t split = whole.layout().layer_range(at).begin;
  EXPECT_TRUE(bitwise_equal(first->store().grads(), whole.grads().first(split)));
  EXPECT_TRUE(bitwise_equal(second->store().grads(), whole.grads().subspan(split)));
}

INSTANTIATE_TEST_SUITE_P(Cuts, StageCut, ::testing::Values(Cut{1}, Cut{2}, Cut{4}),
                         [](const auto& info) {
                           return "after_layer_" + std::to_string(info.param.at);
                         });

// Micro-batches in flight (F0 F1 F2 B0 B1 B2, as GPipe runs them, and F0 F1 B0 F2 B1 B2, as
// 1F1B does) accumulate the same gradients as running them one after another.
TEST(LayerStackPasses, MicroBatchesInFlightAccumulateAsSequentialOnes) {
  const int M = 3, L = kConfig.num_blocks;
  std::vector<std::vector<float>> xs, ts;
  for (int m = 0; m < M; ++m) {
    xs.push_back(random_vector(kBatch * kConfig.input_dim, 10 + m));
    ts.push_back(random_vector(kBatch * kConfig.output_dim, 20 + m));
  }
  MlpModel sequential(kConfig, 3);
  for (int m = 0; m < M; ++m) sequential.forward_backward(xs[m], ts[m], kBatch, 0.5f);

  // The loss runs right after a pass's forward (as on a last stage), its backward later.
  const std::vector<std::vector<char>> orders = {{'F', 'F', 'F', 'B', 'B', 'B'},
                                                 {'F', 'F', 'B', 'F', 'B', 'B'}};
  for (const std::vector<char>& order : orders) {
    auto s = stage(0, L + 1);
    MseLoss mse(kConfig.output_dim);
    std::vector<std::vector<float>> dys(M);
    int f = 0, b = 0;
    for (char op : order) {
      if (op == 'F') {
        std::span<const float> y = s->forward(f, xs[f], kBatch);
        std::span<float> dy = s->loss_grad(kBatch);
        mse.forward_backward(y, {.values = ts[f], .labels = {}}, kBatch, 0.5f, dy);
        dys[f].assign(dy.begin(), dy.end());
        ++f;
      } else {
        s->backward(b, dys[b], {0.5f, kBatch});
        ++b;
      }
    }
    EXPECT_TRUE(bitwise_equal(s->store().grads(), sequential.grads()));
  }
}

// Backward with write_grads overwrites the store's gradients, bit for bit what zero_grad
// then backward leaves: layers that write (MlpBlock, Linear) and, zero-filled by the stack,
// one that only accumulates. Fused and split backward; the grads start as NaN.
TEST(LayerStackPasses, WriteGradsEqualsZeroGradThenAccumulateBitwise) {
  struct AccumulatingLinear : Linear {
    using Linear::Linear;
    bool writes_grads() const override { return false; }
  };
  for (const bool only_accumulates : {false, true}) {
    for (const bool split : {false, true}) {
      auto make = [&] {
        Layers layers = mlp_layers(kConfig, 0, kConfig.num_blocks + 1);
        if (only_accumulates) {
          layers.back() =
              std::make_unique<AccumulatingLinear>("head", kConfig.input_dim, kConfig.output_dim);
        }
        auto s = std::make_unique<LayerStack>(std::move(layers), Precision::kFp32);
        s->store().set_params(init_params(s->layout(), 3));
        return s;
      };
      auto a = make(), b = make();
      const auto x = random_vector(kBatch * kConfig.input_dim, 10);
      const auto t = random_vector(kBatch * kConfig.output_dim, 11);
      a->store().zero_grad();
      std::fill(b->store().grads().begin(), b->store().grads().end(), std::nanf(""));
      for (LayerStack* s : {a.get(), b.get()}) {
        const bool write = s == b.get();
        std::span<const float> y = s->forward(0, x, kBatch);
        std::span<float> dy = s->loss_grad(kBatch);
        MseLoss(kConfig.output_dim)
            .forward_backward(y, {.values = t, .labels = {}}, kBatch, 0.5f, dy);
        const BackwardScale scale{0.5f, kBatch, write};
        if (split) {
          s->backward_input(0, dy, scale);
          s->backward_weight(0, scale);
        } else {
          s->backward(0, dy, scale);
        }
      }
      EXPECT_TRUE(bitwise_equal(a->store().grads(), b->store().grads()))
          << "only_accumulates " << only_accumulates << " split " << split;
    }
  }
}

// ZB-H1's split backward: B (input gradient) now, W (weight gradients) later, in any
// interleaving with other passes, gives fused backward's input gradients and weight
// gradients bit for bit (W in micro-batch order, as accumulation adds them).
TEST(LayerStackPasses, SplitBackwardIsFusedBackwardBitwise) {
  const int M = 3, L = kConfig.num_blocks;
  std::vector<std::vector<float>> xs, dys;
  for (int m = 0; m < M; ++m) {
    xs.push_back(random_vector(kBatch * kConfig.input_dim, 10 + m));
    dys.push_back(random_vector(kBatch * kConfig.input_dim, 20 + m));
  }
  // Blocks 1 and 2 (a middle stage, which sends its input gradient back), then the whole
  // model without an input gradient (a first stage).
  for (const auto& [first, last, input_grad] :
       {std::tuple{1, 3, true}, std::tuple{0, L + 1, false}}) {
    auto fused = stage(first, last), split = stage(first, last);
    ASSERT_TRUE(split->splits_backward());
    const size_t out = size_t(kBatch) * fused->out_dim();
    std::vector<std::vector<float>> want_dx, got_dx;
    for (int m = 0; m < M; ++m) {
      fused->forward(0, xs[m], kBatch);
      std::vector<float> dy(dys[m].begin(), dys[m].begin() + out);
      std::span<const float> dx = fused->backward(0, dy, {0.5f, kBatch}, nullptr, input_grad);
      want_dx.emplace_back(dx.begin(), dx.end());
    }
    for (int m = 0; m < M; ++m) split->forward(m, xs[m], kBatch);  // F F F B B W B W W
    int w = 0;  // the next W, in micro-batch order
    for (int m : {0, 1, -1, 2, -1, -1}) {
      if (m < 0) {
        split->backward_weight(w++, {0.5f, kBatch});
        continue;
      }
      std::vector<float> dy(dys[m].begin(), dys[m].begin() + out);
      std::span<const float> dx = split->backward_input(m, dy, {0.5f, kBatch}, input_grad);
      got_dx.emplace_back(dx.begin(), dx.end());
    }
    ASSERT_EQ(got_dx.size(), want_dx.size());
    for (int m = 0; m < M; ++m) {
      EXPECT_TRUE(bitwise_equal(got_dx[m], want_dx[m])) << "input gradient of micro-batch " << m;
    }
    EXPECT_TRUE(bitwise_equal(split->store().grads(), fused->store().grads()))
        << "weight gradients, layers [" << first << ", " << last << ")";
  }
}

// A stage's activation memory grows by one pass's worth per micro-batch in flight: its
// input copy, every layer's output and each block's saved pre-activations and GELU outputs.
TEST(LayerStackPasses, ActivationMemoryPerPassMatchesItsFormula) {
  const int D = kConfig.input_dim, H = kConfig.hidden_dim;
  auto s = stage(1, 3);  // blocks 1 and 2: no head
  const auto x = random_vector(kBatch * D, 1);
  s->forward(0, x, kBatch);
  const int64_t one = s->memory().bytes(MemoryCategory::kActivations);
  s->forward(1, x, kBatch);
  s->forward(2, x, kBatch);
  const int64_t three = s->memory().bytes(MemoryCategory::kActivations);
  const int64_t per_pass = 4 * (kBatch * D + 2 * kBatch * D + 2 * 2 * kBatch * H);
  EXPECT_EQ(three - one, 2 * per_pass);
  EXPECT_EQ(one, per_pass);  // forward uses no workspace
}

}  // namespace
}  // namespace dtsim::model
