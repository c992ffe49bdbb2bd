// bfloat16: the upper 16 bits of an IEEE-754 binary32, rounded to nearest, ties to even.
// Shared by the runtime (bf16 reductions) and the model (mixed-precision weights and
// gradients); header-only and free of any notion of ranks or layers.
#pragma once

#include <bit>
#include <cstdint>

namespace dtsim {

struct BFloat16 {
  uint16_t bits = 0;

  BFloat16() = default;
  explicit BFloat16(float f) : bits(round_from_float(f)) {}
  explicit operator float() const { return std::bit_cast<float>(uint32_t{bits} << 16); }

  static BFloat16 from_bits(uint16_t b) {
    BFloat16 h;
    h.bits = b;
    return h;
  }

  // Round-to-nearest-even of the low 16 bits; NaN stays a (quiet) NaN, values above the
  // largest finite bf16 round to infinity, subnormals round like any other value.
  static uint16_t round_from_float(float f) {
    const uint32_t u = std::bit_cast<uint32_t>(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
    const uint32_t lsb = (u >> 16) & 1u;
    return static_cast<uint16_t>((u + 0x7fffu + lsb) >> 16);
  }
};

static_assert(sizeof(BFloat16) == 2);

inline bool operator==(BFloat16 a, BFloat16 b) { return a.bits == b.bits; }

}  // namespace dtsim
