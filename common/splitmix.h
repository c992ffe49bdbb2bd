// splitmix64 (Steele, Lea, Flood 2014): the one small seeded generator and integer mixer
// dtsim uses wherever bits must not depend on the standard library (model init and data,
// communicator ids, stress plans, jitter). Header-only, no notion of ranks or layers.
#pragma once

#include <cstdint>

namespace dtsim {

// splitmix64's finalizer: a bijective scramble of 64 bits.
inline uint64_t splitmix64_finalize(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Advances `state` by the golden-ratio increment and returns the next 64 random bits.
inline uint64_t splitmix64_next(uint64_t& state) {
  return splitmix64_finalize(state += 0x9e3779b97f4a7c15ull);
}

// Mixes two integers into one well-scrambled 64-bit value (a hash combine).
inline uint64_t mix64(uint64_t a, uint64_t b) {
  return splitmix64_finalize(a * 0x9e3779b97f4a7c15ull + b + 0x632be59bd9b4e019ull);
}

}  // namespace dtsim
