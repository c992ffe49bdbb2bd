// Chunk arithmetic shared by the ring and pairwise algorithms.
#pragma once

#include <cstddef>

#include "runtime/split.h"

namespace dtsim {

// (a mod n) for possibly negative a.
inline int mod(int a, int n) { return ((a % n) + n) % n; }

// The tensor_split layout of `count` elements over `parts` chunks.
struct Chunks {
  size_t count;
  size_t parts;
  size_t size(int i) const { return split_size(count, parts, static_cast<size_t>(i)); }
  size_t offset(int i) const { return split_offset(count, parts, static_cast<size_t>(i)); }
};

}  // namespace dtsim
