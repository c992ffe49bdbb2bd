// Memory accounting: 16 bytes per parameter under mixed-precision Adam (2 + 2 + 4 + 4 + 4)
// and under fp32 Adam (4 + 4 + 4 + 4, no master copy), 12 under SGD with momentum, and a
// ZeRO-style shard ledger that holds only 12 * Psi / N of optimizer state.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "model/memory.h"
#include "model/mlp.h"
#include "model/moe_model.h"
#include "model/optimizer.h"
#include "tests/model/grad_check.h"

namespace dtsim::model {
namespace {

using MC = MemoryCategory;

const MlpConfig kConfig{.input_dim = 12, .hidden_dim = 20, .num_blocks = 3, .output_dim = 5};

TEST(MemoryTest, FormulaBytesPerParam) {
  EXPECT_EQ(static_bytes_per_param(Precision::kMixedBf16, OptimizerKind::kAdam), 16);
  EXPECT_EQ(static_bytes_per_param(Precision::kFp32, OptimizerKind::kAdam), 16);
  EXPECT_EQ(static_bytes_per_param(Precision::kFp32, OptimizerKind::kSgdMomentum), 12);
  EXPECT_EQ(static_bytes_per_param(Precision::kMixedBf16, OptimizerKind::kSgdMomentum), 12);
  EXPECT_EQ(static_bytes_per_param(Precision::kFp32, OptimizerKind::kSgd), 8);
}

TEST(MemoryTest, MixedPrecisionAdamIsSixteenBytesPerParam) {
  MlpModel model(kConfig, 1, Precision::kMixedBf16);
  const int64_t psi = static_cast<int64_t>(model.num_params());
  Adam adam({}, model.store().params_bf16(), &model.memory());
  const MemoryLedger& m = model.memory();
  EXPECT_EQ(m.bytes(MC::kWeights), 2 * psi);
  EXPECT_EQ(m.bytes(MC::kGradients), 2 * psi);
  EXPECT_EQ(m.bytes(MC::kMasterWeights), 4 * psi);
  EXPECT_EQ(m.bytes(MC::kAdamM), 4 * psi);
  EXPECT_EQ(m.bytes(MC::kAdamV), 4 * psi);
  EXPECT_EQ(m.static_bytes(), 16 * psi);
  EXPECT_EQ(m.static_bytes(),
            static_bytes_per_param(Precision::kMixedBf16, OptimizerKind::kAdam) * psi);
}

TEST(MemoryTest, Fp32AdamIsSixteenBytesPerParamWithoutMaster) {
  MlpModel model(kConfig, 1);
  const int64_t psi = static_cast<int64_t>(model.num_params());
  Adam adam({}, model.num_params(), &model.memory());
  const MemoryLedger& m = model.memory();
  EXPECT_EQ(m.bytes(MC::kWeights), 4 * psi);
  EXPECT_EQ(m.bytes(MC::kGradients), 4 * psi);
  EXPECT_EQ(m.bytes(MC::kMasterWeights), 0);
  EXPECT_EQ(m.static_bytes(), 16 * psi);
}

TEST(MemoryTest, SgdMomentumAndMoeModel) {
  MoeModelConfig c;
  MoeModel model(c, 1);
  const int64_t psi = static_cast<int64_t>(model.num_params());
  Sgd sgd({.momentum = 0.9f}, model.num_params(), &model.memory());
  EXPECT_EQ(model.memory().static_bytes(), 12 * psi);
}

TEST(MemoryTest, ActivationsAreCountedAndFollowTheBatch) {
  MlpModel model(kConfig, 1);
  EXPECT_EQ(model.memory().bytes(MC::kActivations), 0);
  const auto x = testing::random_vector(8 * kConfig.input_dim, 2);
  const auto t = testing::random_vector(8 * kConfig.output_dim, 3);
  model.forward_backward(x, t, 8);
  const int64_t at8 = model.memory().bytes(MC::kActivations);
  // xs (L+1)BD + pre, hid 2LBH + out, dout 2BO + dx BD + dpre BH, in floats (dh = dy W2 is
  // never stored: GELU's derivative multiplies it as the GEMM stores it)
  const int64_t D = 12, H = 20, L = 3, O = 5, B = 8;
  EXPECT_EQ(at8, 4 * ((L + 1) * B * D + 2 * L * B * H + 2 * B * O + B * D + B * H));
  model.forward_backward(std::span(x).first(4 * D), std::span(t).first(4 * O), 4);
  EXPECT_EQ(model.memory().bytes(MC::kActivations), at8 / 2);
}

TEST(MemoryTest, ShardLedgerHoldsOnlyItsSliceOfOptimizerState) {
  // ZeRO-1 under mixed precision: rank r keeps master, m, v for its shard only.
  MlpModel model(kConfig, 1, Precision::kMixedBf16);
  const size_t psi = model.num_params();
  const int ranks = 4;
  int64_t total = 0;
  for (int r = 0; r < ranks; ++r) {
    MemoryLedger shard_ledger;
    const ParamRange s = shard_range(psi, ranks, r);
    Adam adam({}, model.store().params_bf16().subspan(s.begin, s.size()), &shard_ledger);
    EXPECT_EQ(shard_ledger.static_bytes(), 12 * static_cast<int64_t>(s.size()));
    total += shard_ledger.static_bytes();
  }
  EXPECT_EQ(total, 12 * static_cast<int64_t>(psi));
}

TEST(MemoryTest, TrackedBufferReleasesOnDestruction) {
  MemoryLedger ledger;
  {
    TrackedBuffer<float> a(&ledger, MC::kAdamM, 10);
    TrackedBuffer<BFloat16> b(&ledger, MC::kWeights, 10);
    EXPECT_EQ(ledger.total_bytes(), 60);
    TrackedBuffer<float> moved = std::move(a);
    EXPECT_EQ(ledger.bytes(MC::kAdamM), 40);
    moved.resize(5);
    EXPECT_EQ(ledger.bytes(MC::kAdamM), 20);
  }
  EXPECT_EQ(ledger.total_bytes(), 0);
}

// The ledger keeps each category's peak; releasing a buffer lowers the live bytes only.
TEST(MemoryTest, LedgerKeepsThePeakPerCategory) {
  MemoryLedger ledger;
  TrackedBuffer<float> a(&ledger, MC::kActivations, 10);
  {
    TrackedBuffer<float> b(&ledger, MC::kActivations, 5);
    EXPECT_EQ(ledger.peak_bytes(MC::kActivations), 60);
  }
  a.release();
  EXPECT_EQ(ledger.bytes(MC::kActivations), 0);
  EXPECT_EQ(ledger.peak_bytes(MC::kActivations), 60);
  EXPECT_EQ(ledger.peak_bytes(MC::kWeights), 0);
  TrackedBuffer<float> c(&ledger, MC::kActivations, 3);
  ledger.reset_peaks();
  EXPECT_EQ(ledger.peak_bytes(MC::kActivations), 12);
}

// Buffers of 2 MiB and more start on a 2 MiB boundary (so they can be huge pages), hold
// their initial value everywhere and count their logical size only; smaller ones as before.
TEST(MemoryTest, LargeTrackedBuffersAreHugePageAlignedAndCountedByTheirSize) {
  MemoryLedger ledger;
  const size_t big = (size_t{2} << 20) / sizeof(float) + 5, small = 1000;
  TrackedBuffer<float> a(&ledger, MC::kWeights, big, 1.5f);
  TrackedBuffer<float> b(&ledger, MC::kGradients, small, 2.5f);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % (size_t{2} << 20), 0u);
  EXPECT_EQ(ledger.bytes(MC::kWeights), static_cast<int64_t>(big * sizeof(float)));
  EXPECT_EQ(a[0], 1.5f);
  EXPECT_EQ(a[big - 1], 1.5f);
  EXPECT_EQ(b[small - 1], 2.5f);
  a.resize(small);  // shrinks in place (a vector keeps its block): the ledger follows the size
  EXPECT_EQ(a[small - 1], 1.5f);
  EXPECT_EQ(ledger.bytes(MC::kWeights), static_cast<int64_t>(small * sizeof(float)));
}

// A large block freed is kept and handed to the next buffer of its rounded size, filled
// afresh (ZeRO-3 gathers a layer into one every use); the ledger still counts each
// buffer only while it lives.
TEST(MemoryTest, FreedLargeBlocksAreReusedAndRefilled) {
  MemoryLedger ledger;
  const size_t big = (size_t{4} << 20) / sizeof(float) + 7;
  const float* first = nullptr;
  {
    TrackedBuffer<float> a(&ledger, MC::kWeights, big, 1.5f);
    a[3] = 9.0f;
    first = a.data();
  }
  EXPECT_EQ(ledger.bytes(MC::kWeights), 0);
  const size_t rounded = size_t{6} << 20;  // 4 MiB + 28 B, in 2 MiB pages
#if !defined(__SANITIZE_ADDRESS__)
  void* kept = take_huge_block(rounded);
  EXPECT_EQ(kept, first) << "the freed block was not kept";
  if (kept != nullptr) keep_huge_block(kept, rounded);
#endif
  TrackedBuffer<float> b(&ledger, MC::kWeights, big, 2.5f);
#if !defined(__SANITIZE_ADDRESS__)
  EXPECT_EQ(b.data(), first) << "the kept block was not reused";
#endif
  EXPECT_EQ(b[3], 2.5f);
  EXPECT_EQ(b[big - 1], 2.5f);
  EXPECT_EQ(ledger.bytes(MC::kWeights), static_cast<int64_t>(big * sizeof(float)));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % (size_t{2} << 20), 0u);
}

}  // namespace
}  // namespace dtsim::model
