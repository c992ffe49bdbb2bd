// dtsim::BFloat16 rounding against hand-picked binary32 bit patterns.
#include "common/bf16.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "model/kernels.h"

namespace dtsim {
namespace {

uint16_t round_bits(uint32_t f32_bits) { return BFloat16(std::bit_cast<float>(f32_bits)).bits; }

TEST(BFloat16Test, ExactValuesRoundTrip) {
  EXPECT_EQ(BFloat16(1.0f).bits, 0x3f80);
  EXPECT_EQ(BFloat16(-2.0f).bits, 0xc000);
  EXPECT_EQ(BFloat16(0.0f).bits, 0x0000);
  EXPECT_EQ(BFloat16(-0.0f).bits, 0x8000);
  for (float v : {1.0f, -3.5f, 0.15625f, 65536.0f}) {
    EXPECT_EQ(static_cast<float>(BFloat16(v)), v);
  }
}

TEST(BFloat16Test, RoundsToNearest) {
  EXPECT_EQ(round_bits(0x3f807fff), 0x3f80);  // just below half an ulp: down
  EXPECT_EQ(round_bits(0x3f808001), 0x3f81);  // just above half an ulp: up
  EXPECT_EQ(round_bits(0xbf808001), 0xbf81);  // negative values round by magnitude
  // 1/3 = 0x3eaaaaab -> 0x3eab (0xaaab > 0x8000)
  EXPECT_EQ(BFloat16(1.0f / 3.0f).bits, 0x3eab);
}

TEST(BFloat16Test, TiesGoToEven) {
  EXPECT_EQ(round_bits(0x3f808000), 0x3f80);  // tie, lsb 0: stays
  EXPECT_EQ(round_bits(0x3f818000), 0x3f82);  // tie, lsb 1: up to even
  EXPECT_EQ(round_bits(0xbf818000), 0xbf82);
  EXPECT_EQ(round_bits(0x3fff8000), 0x4000);  // tie carries into the exponent: 1.9921875+ -> 2
  EXPECT_EQ(BFloat16(1.0f + 0x1.0p-8f).bits, 0x3f80);  // 1 + half ulp -> 1 (even)
  EXPECT_EQ(BFloat16(1.0f + 3 * 0x1.0p-8f).bits, 0x3f82);
}

TEST(BFloat16Test, OverflowGoesToInfinity) {
  EXPECT_EQ(round_bits(0x7f7f7fff), 0x7f7f);  // rounds down to the largest finite bf16
  EXPECT_EQ(round_bits(0x7f7f8000), 0x7f80);  // tie above the largest finite (odd): +inf
  EXPECT_EQ(round_bits(0x7f7fffff), 0x7f80);  // FLT_MAX: +inf
  EXPECT_EQ(round_bits(0xff7fffff), 0xff80);  // -FLT_MAX: -inf
  EXPECT_EQ(BFloat16(INFINITY).bits, 0x7f80);
  EXPECT_EQ(BFloat16(-INFINITY).bits, 0xff80);
}

TEST(BFloat16Test, SubnormalsRoundLikeOtherValues) {
  EXPECT_EQ(round_bits(0x00000001), 0x0000);  // smallest float subnormal: to +0
  EXPECT_EQ(round_bits(0x80000001), 0x8000);  // to -0
  EXPECT_EQ(round_bits(0x00010000), 0x0001);  // smallest bf16 subnormal, exact
  EXPECT_EQ(round_bits(0x00008000), 0x0000);  // tie, lsb 0
  EXPECT_EQ(round_bits(0x00018000), 0x0002);  // tie, lsb 1
  EXPECT_EQ(round_bits(0x007fffff), 0x0080);  // largest subnormal rounds up to min normal
  EXPECT_EQ(static_cast<float>(BFloat16::from_bits(0x0001)), 0x1.0p-133f);
}

TEST(BFloat16Test, NanStaysNan) {
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xffffffffu, 0x7f80ffffu, 0x7fff8000u}) {
    const BFloat16 h(std::bit_cast<float>(nan));
    EXPECT_TRUE(std::isnan(static_cast<float>(h))) << std::hex << nan;
    EXPECT_EQ(h.bits & 0x8000, (nan >> 16) & 0x8000) << "sign kept";
  }
  // A signalling NaN whose payload lies only in the low 16 bits must not become infinity.
  EXPECT_EQ(round_bits(0x7f800001), 0x7fc0);
}

// The vectorised mixed-precision kernels give the scalar BFloat16 bits: every bf16 pattern
// widens exactly, and accumulation rounds like BFloat16(float) on a sweep of sums that
// covers ties, carries into the exponent, overflow to infinity and NaN.
TEST(BFloat16KernelTest, WidenAndAccumulateMatchTheScalarBits) {
  std::vector<BFloat16> all(65536);
  for (uint32_t b = 0; b < 65536; ++b) all[b] = BFloat16::from_bits(uint16_t(b));
  std::vector<float> wide(all.size());
  model::bf16_widen(all, wide);
  for (uint32_t b = 0; b < 65536; ++b) {
    ASSERT_EQ(std::bit_cast<uint32_t>(wide[b]), b << 16) << b;
  }
  const float adds[] = {0.0f, 1.0f / 512, -1.0f / 256, 3.0e-3f, 1.5f, -7.0f, 1e38f, -1e38f, NAN};
  for (float add : adds) {
    std::vector<BFloat16> acc = all;
    std::vector<float> addv(acc.size(), add);
    model::bf16_accumulate(acc, addv);
    for (uint32_t b = 0; b < 65536; ++b) {
      const BFloat16 want(static_cast<float>(all[b]) + add);
      ASSERT_EQ(acc[b].bits, want.bits) << "bits " << b << " + " << add;
    }
  }
}

}  // namespace
}  // namespace dtsim
