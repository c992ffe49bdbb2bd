// How a length splits over parts, exactly as torch.tensor_split: the first n % parts
// chunks get one extra element (10 over 4 gives 3, 3, 2, 2).
#pragma once

#include <algorithm>
#include <cstddef>

namespace dtsim {

// Number of elements in chunk i of n elements split into `parts` chunks.
constexpr size_t split_size(size_t n, size_t parts, size_t i) {
  return n / parts + (i < n % parts ? 1 : 0);
}

// Offset of chunk i of n elements split into `parts` chunks.
constexpr size_t split_offset(size_t n, size_t parts, size_t i) {
  return i * (n / parts) + std::min(i, n % parts);
}

}  // namespace dtsim
