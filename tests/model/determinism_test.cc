// Same seed, same bits (init, data, training); different seeds differ; whole-model
// forward/backward gives the same bits with TBB limited to 1 thread and to 2 threads, and
// when many "rank" threads run models concurrently.
#include <gtest/gtest.h>
#include <oneapi/tbb/global_control.h>

#include <cstring>
#include <thread>
#include <vector>

#include "model/data.h"
#include "model/mlp.h"
#include "model/moe_model.h"
#include "model/optimizer.h"

namespace dtsim::model {
namespace {

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// A few Adam steps of an MLP wide enough that its kernels take the parallel path.
std::vector<float> train_mlp(uint64_t seed, int steps) {
  const MlpConfig c{.input_dim = 64, .hidden_dim = 256, .num_blocks = 2, .output_dim = 8};
  MlpModel model(c, seed);
  const RegressionTask task(c.input_dim, c.output_dim, seed + 1);
  Adam adam({.lr = 1e-3f}, model.num_params());
  const int B = 96;
  std::vector<float> x(B * c.input_dim), y(B * c.output_dim);
  for (int s = 0; s < steps; ++s) {
    task.batch(s, 0, B, x, y);
    model.zero_grad();
    model.forward_backward(x, y, B);
    adam.step(model.params(), model.grads());
  }
  std::vector<float> out(model.params().begin(), model.params().end());
  out.insert(out.end(), model.grads().begin(), model.grads().end());
  return out;
}

std::vector<float> moe_grads(uint64_t seed) {
  MoeModelConfig c;
  c.input_dim = 32;
  c.moe = {.d_model = 64, .d_ff = 128, .num_experts = 4, .top_k = 2, .capacity_factor = 1.0f};
  MoeModel model(c, seed);
  const ClassificationTask task(c.input_dim, c.num_classes, seed + 1);
  const int B = 256;
  std::vector<float> x(B * c.input_dim);
  std::vector<int32_t> labels(B);
  task.batch(0, 0, B, x, labels);
  model.zero_grad();
  model.forward_backward(x, labels, B);
  return {model.grads().begin(), model.grads().end()};
}

TEST(DeterminismTest, SameSeedSameBitsDifferentSeedDifferentBits) {
  EXPECT_TRUE(same_bits(train_mlp(1, 3), train_mlp(1, 3)));
  EXPECT_FALSE(same_bits(train_mlp(1, 3), train_mlp(2, 3)));
  EXPECT_TRUE(same_bits(moe_grads(5), moe_grads(5)));
  EXPECT_FALSE(same_bits(moe_grads(5), moe_grads(6)));
}

TEST(DeterminismTest, DataSlicesEqualTheGlobalBatch) {
  const ClassificationTask task(10, 5, 3);
  std::vector<float> x(16 * 10), xs(4 * 10);
  std::vector<int32_t> l(16), ls(4);
  task.batch(42, 0, 16, x, l);
  for (int r = 0; r < 4; ++r) {
    task.batch(42, r * 4, 4, xs, ls);
    EXPECT_TRUE(same_bits(xs, std::span(x).subspan(r * 40, 40)));
    EXPECT_EQ(ls, std::vector<int32_t>(l.begin() + r * 4, l.begin() + r * 4 + 4));
  }
  std::vector<float> other(16 * 10);
  task.batch(43, 0, 16, other, l);
  EXPECT_FALSE(same_bits(x, other));  // another step, other samples
}

TEST(DeterminismTest, ModelsGiveSameBitsWithOneAndTwoThreads) {
  std::vector<float> mlp1, mlp2, moe1, moe2;
  {
    tbb::global_control one(tbb::global_control::max_allowed_parallelism, 1);
    mlp1 = train_mlp(3, 2);
    moe1 = moe_grads(3);
  }
  {
    tbb::global_control two(tbb::global_control::max_allowed_parallelism, 2);
    mlp2 = train_mlp(3, 2);
    moe2 = moe_grads(3);
  }
  EXPECT_TRUE(same_bits(mlp1, mlp2));
  EXPECT_TRUE(same_bits(moe1, moe2));
}

TEST(DeterminismTest, ConcurrentRankThreadsGetTheSameBits) {
  const std::vector<float> reference = train_mlp(4, 2);
  const int threads = 8;
  std::vector<std::vector<float>> results(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&results, t] { results[t] = train_mlp(4, 2); });
  }
  for (std::thread& th : pool) th.join();
  for (const auto& r : results) EXPECT_TRUE(same_bits(r, reference));
}

}  // namespace
}  // namespace dtsim::model
