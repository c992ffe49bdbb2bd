// Chunk arithmetic shared by the ring and pairwise algorithms.
#pragma once

#include <cstddef>

#include "runtime/split.h"

namespace dtsim {

// (a mod n) for possibly negative a.
inline int mod(int a, int n) { return ((a % n) + n) % n; }

// The tensor_split layout of `count` elements over `parts` chunks.
// `off_by_one` plants Mutant::kSplitOffByOne: chunk n % parts of an uneven split gets an
// extra element too (the first n % parts + 1 chunks do), which overlaps the next chunk
// (never past the end of the buffer).
struct Chunks {
  size_t count;
  size_t parts;
  bool off_by_one = false;
  size_t size(int i) const {
    const size_t k = static_cast<size_t>(i);
    if (off_by_one && count % parts && k == count % parts && k + 1 < parts && count >= parts)
      return count / parts + 1;
    return split_size(count, parts, k);
  }
  size_t offset(int i) const { return split_offset(count, parts, static_cast<size_t>(i)); }
};

}  // namespace dtsim
