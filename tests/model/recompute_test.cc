// Activation recomputation (LayerStack's Recompute): selective and full give the gradients,
// input gradients and outputs of no recomputation bit for bit, for MLP and MoE stacks, several
// batches and micro-batches in flight, with backward, the split backward of ZB-H1 and SGD in
// backward; and the measured activation peak drops (full at least halves an MLP stage's).
#include <gtest/gtest.h>

#include <bit>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "model/layer_stack.h"
#include "model/mlp.h"
#include "model/moe_model.h"
#include "model/param_layout.h"
#include "tests/model/grad_check.h"

namespace dtsim::model {
namespace {

using testing::random_vector;

const MlpConfig kMlp{.input_dim = 16, .hidden_dim = 64, .num_blocks = 4, .output_dim = 3};
const MoeModelConfig kMoe{
    .input_dim = 6,
    .num_classes = 4,
    .moe = {.d_model = 8, .d_ff = 16, .num_experts = 4, .top_k = 2, .capacity_factor = 1.25f},
    .num_blocks = 2};

enum class Kind { kMlp, kMoe };
enum class Backward { kFused, kSplit, kSgd };

bool bitwise_equal(std::span<const float> a, std::span<const float> b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::bit_cast<uint32_t>(a[i]) != std::bit_cast<uint32_t>(b[i])) return false;
  }
  return true;
}

// Layers [first, last) of the MLP (blocks, then the head at kMlp.num_blocks), or the whole MoE
// classifier, seeded alike whatever `r`.
std::unique_ptr<LayerStack> make_stack(Kind kind, Recompute r, int first = 0, int last = -1,
                                       bool copy_input = true) {
  Layers layers = kind == Kind::kMlp
                      ? mlp_layers(kMlp, first, last < 0 ? kMlp.num_blocks + 1 : last)
                      : moe_model_layers(kMoe);
  auto s = std::make_unique<LayerStack>(std::move(layers), Precision::kFp32, copy_input, r);
  s->store().set_params(init_params(s->layout(), 7));
  return s;
}

// What a step of M micro-batches leaves: each pass's output and input gradient, the
// gradients and the parameters.
struct Outcome {
  std::vector<std::vector<float>> ys, dxs;
  std::vector<float> grads, params;
};

// Forwards M micro-batches of `batch` samples (all in flight), then runs their backwards in
// order; write_grads on the first, accumulate on the rest.
Outcome run(LayerStack& s, Backward how, int batch, int M) {
  Outcome o;
  std::vector<std::vector<float>> xs;
  for (int m = 0; m < M; ++m) xs.push_back(random_vector(size_t(batch) * s.in_dim(), 10 + m));
  for (int m = 0; m < M; ++m) {
    std::span<const float> y = s.forward(m, xs[m], batch);
    o.ys.emplace_back(y.begin(), y.end());
  }
  const SgdUpdate u{.lr = 0.1f, .weight_decay = 0.01f};
  for (int m = 0; m < M; ++m) {
    std::vector<float> dy = random_vector(size_t(batch) * s.out_dim(), 20 + m);
    const BackwardScale scale{0.5f, batch, m == 0};
    std::span<const float> dx;
    if (how == Backward::kFused) dx = s.backward(m, dy, scale, nullptr, true);
    if (how == Backward::kSplit) dx = s.backward_input(m, dy, scale, true);
    if (how == Backward::kSgd) dx = s.backward_sgd(m, dy, scale, u, nullptr, true);
    o.dxs.emplace_back(dx.begin(), dx.end());
  }
  if (how == Backward::kSplit) {  // ZB-H1 defers the weight halves past every input half
    for (int m = 0; m < M; ++m) s.backward_weight(m, {0.5f, batch, m == 0});
  }
  o.grads.assign(s.store().grads().begin(), s.store().grads().end());
  o.params.assign(s.store().params().begin(), s.store().params().end());
  return o;
}

void expect_bitwise(const Outcome& got, const Outcome& want) {
  ASSERT_EQ(got.ys.size(), want.ys.size());
  for (size_t m = 0; m < want.ys.size(); ++m) {
    EXPECT_TRUE(bitwise_equal(got.ys[m], want.ys[m])) << "output of micro-batch " << m;
    EXPECT_TRUE(bitwise_equal(got.dxs[m], want.dxs[m])) << "input gradient of micro-batch " << m;
  }
  EXPECT_TRUE(bitwise_equal(got.grads, want.grads)) << "gradients";
  EXPECT_TRUE(bitwise_equal(got.params, want.params)) << "parameters";
}

using Case = std::tuple<Kind, Recompute, Backward, int /*batch*/>;

class RecomputeBitwise : public ::testing::TestWithParam<Case> {};

TEST_P(RecomputeBitwise, GradientsEqualNoRecomputation) {
  const auto [kind, r, how, batch] = GetParam();
  // SGD in backward runs one pass at a time (a second in flight would recompute from the
  // parameters the first one updated; the stack refuses that under full, tested below).
  const int M = how == Backward::kSgd ? 1 : 3;
  auto want_stack = make_stack(kind, Recompute::kNone);
  auto got_stack = make_stack(kind, r);
  const Outcome want = run(*want_stack, how, batch, M);
  const Outcome got = run(*got_stack, how, batch, M);
  expect_bitwise(got, want);
  // The stacks run again (buffers reused, states rebuilt) and still agree.
  expect_bitwise(run(*got_stack, how, batch, M), run(*want_stack, how, batch, M));
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const auto [kind, r, how, batch] = info.param;
  const char* hows[] = {"backward", "split", "sgd"};
  return std::string(kind == Kind::kMlp ? "mlp_" : "moe_") + recompute_name(r) + "_" +
         hows[static_cast<int>(how)] + "_b" + std::to_string(batch);
}

INSTANTIATE_TEST_SUITE_P(
    Mlp, RecomputeBitwise,
    ::testing::Combine(::testing::Values(Kind::kMlp),
                       ::testing::Values(Recompute::kSelective, Recompute::kFull),
                       ::testing::Values(Backward::kFused, Backward::kSplit, Backward::kSgd),
                       ::testing::Values(1, 5, 32)),
    case_name);
// MoE blocks have neither a split backward nor SGD in backward (their stacks refuse both).
INSTANTIATE_TEST_SUITE_P(
    Moe, RecomputeBitwise,
    ::testing::Combine(::testing::Values(Kind::kMoe),
                       ::testing::Values(Recompute::kSelective, Recompute::kFull),
                       ::testing::Values(Backward::kFused), ::testing::Values(1, 7, 24)),
    case_name);

TEST(Recompute, FullRefusesSgdInBackwardWithTwoPassesInFlight) {
  auto s = make_stack(Kind::kMlp, Recompute::kFull);
  const auto x = random_vector(4 * s->in_dim(), 1);
  s->forward(0, x, 4);
  s->forward(1, x, 4);
  std::vector<float> dy = random_vector(4 * s->out_dim(), 2);
  EXPECT_THROW(s->backward_sgd(0, dy, {0.25f, 4, true}, {.lr = 0.1f}), std::logic_error);
  s->backward(0, dy, {0.25f, 4, true});
  s->backward(1, dy, {0.25f, 4, false});
  s->forward(0, x, 4);  // one pass in flight: allowed
  s->backward_sgd(0, dy, {0.25f, 4, true}, {.lr = 0.1f});
}

// The activation peak of one step of M micro-batches (forward all, then backward all).
int64_t peak_of(LayerStack& s, int batch, int M) {
  run(s, Backward::kFused, batch, M);
  return s.activation_peak();
}

// The whole MLP (four blocks and the head) on one micro-batch: full recomputation keeps the
// block inputs only (B x D each) and rebuilds one block's (B, 2H) at a time.
TEST(RecomputeMemory, FullAtLeastHalvesAMultiBlockMlpStack) {
  const int B = 32;
  auto none = make_stack(Kind::kMlp, Recompute::kNone);
  auto selective = make_stack(Kind::kMlp, Recompute::kSelective);
  auto full = make_stack(Kind::kMlp, Recompute::kFull);
  const int64_t n = peak_of(*none, B, 1), s = peak_of(*selective, B, 1), f = peak_of(*full, B, 1);
  EXPECT_LT(s, n);
  EXPECT_LE(2 * f, n) << "none " << n << " B, full " << f << " B";
  // What each keeps, worked out: the input and layer outputs, the states, the workspaces.
  const int64_t D = kMlp.input_dim, H = kMlp.hidden_dim, O = kMlp.output_dim, L = kMlp.num_blocks;
  const int64_t outs = 4 * B * (D + L * D + O);  // input copy + outputs
  const int64_t ws = 4 * B * (H + D);            // dpre; the head's dx (blocks run in place)
  EXPECT_EQ(n, outs + 4 * B * L * 2 * H + ws);
  EXPECT_EQ(f, outs + 4 * B * 2 * H + ws + 4 * B * D);  // one block's state; the redone output
}

// A pipeline stage (blocks 1 and 2, input not copied) with four micro-batches in flight, as
// GPipe holds them: full keeps 2 x (B, D) per micro-batch instead of 2 x (B, D + 2H).
TEST(RecomputeMemory, FullAtLeastHalvesAPipelineStageWithMicroBatchesInFlight) {
  const int B = 8, M = 4;
  auto none = make_stack(Kind::kMlp, Recompute::kNone, 1, 3, false);
  auto full = make_stack(Kind::kMlp, Recompute::kFull, 1, 3, false);
  auto selective = make_stack(Kind::kMlp, Recompute::kSelective, 1, 3, false);
  const int64_t n = peak_of(*none, B, M), f = peak_of(*full, B, M);
  const int64_t s = peak_of(*selective, B, M);
  EXPECT_LE(2 * f, n) << "none " << n << " B, full " << f << " B";
  EXPECT_LT(s, n);
  EXPECT_LT(f, s);
}

TEST(RecomputeMemory, SelectiveDropsMoeExpertGeluOutputs) {
  auto none = make_stack(Kind::kMoe, Recompute::kNone);
  auto selective = make_stack(Kind::kMoe, Recompute::kSelective);
  auto full = make_stack(Kind::kMoe, Recompute::kFull);
  const int64_t n = peak_of(*none, 16, 3), s = peak_of(*selective, 16, 3);
  const int64_t f = peak_of(*full, 16, 3);
  EXPECT_LT(s, n);
  EXPECT_LT(f, s);
  // After the step every state of the full stack is empty again: only kept buffers remain.
  EXPECT_LT(full->memory().bytes(MemoryCategory::kActivations), f);
}

}  // namespace
}  // namespace dtsim::model
