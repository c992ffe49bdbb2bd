// A small seeded RNG (splitmix64) whose bits never depend on the standard library.
#pragma once

#include <cstdint>

#include "common/splitmix.h"

namespace dtsim::model {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  // Next 64 random bits.
  uint64_t next() { return splitmix64_next(state_); }
  // Uniform float in [0, 1) from the top 24 bits (exact in binary32).
  float uniform() { return static_cast<float>(next() >> 40) * 0x1.0p-24f; }
  // Uniform float in [-a, a).
  float uniform(float a) { return (2.0f * uniform() - 1.0f) * a; }

 private:
  uint64_t state_;
};

// Mixes several integers into one seed, so (seed, step, sample) streams are independent.
inline uint64_t mix_seed(uint64_t a, uint64_t b, uint64_t c = 0) {
  SplitMix64 r(a ^ 0x5851f42d4c957f2dull);
  uint64_t s = r.next() ^ b;
  SplitMix64 r2(s);
  s = r2.next() ^ c;
  SplitMix64 r3(s);
  return r3.next();
}

}  // namespace dtsim::model
