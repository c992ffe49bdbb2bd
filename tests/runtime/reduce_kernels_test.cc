// Reducer::reduce_all (the one-pass kernel of all_reduce `shared`) against the kernels it
// replaces: reduce3 of buffers 0 and 1, then reduce of buffers 2..n-1 in order, copied into
// every buffer. Bitwise, for every element type and reduce op, at buffer counts 1-16,
// lengths around the vector strip (tails), unaligned first elements, and values that test
// rounding (floats of mixed magnitude), NaN and signed zeros; elements outside the range
// stay untouched.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/bf16.h"
#include "runtime/reduce_kernels.h"

namespace dtsim::testing {
namespace {

template <class T>
T value(std::mt19937& rng, int i) {
  std::uniform_int_distribution<int> pick(0, 99);
  const int k = pick(rng);
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(k - 50 + i);
  } else {
    // Mixed magnitudes so that the order of the additions shows in the bits.
    const float f = std::ldexp(static_cast<float>(k) / 7.0f - 7.0f, (k % 23) - 11);
    float v = k == 0 ? std::numeric_limits<float>::quiet_NaN() : k == 1 ? -0.0f : k == 2 ? 0.0f : f;
    if constexpr (std::is_same_v<T, BFloat16>) {
      return BFloat16(v);
    } else {
      return static_cast<T>(v);
    }
  }
}

// The reference: reduce3 then reduce, over the range, copied into every buffer.
template <class T>
void reference(const Reducer& red, std::vector<std::vector<T>>& b, size_t first, size_t count) {
  const int n = static_cast<int>(b.size());
  std::vector<T> acc(b[0].begin() + first, b[0].begin() + first + count);
  if (n >= 2) red.reduce3(acc.data(), b[0].data() + first, b[1].data() + first, count);
  for (int p = 2; p < n; ++p) red.reduce(acc.data(), b[p].data() + first, count);
  for (int p = 0; p < n; ++p) std::copy(acc.begin(), acc.end(), b[p].begin() + first);
}

template <class T>
void check_type(DType dtype, const char* name) {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
    const Reducer red = reducer_for(dtype, op);
    for (int n : {1, 2, 3, 4, 8, 16}) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{31}, size_t{32}, size_t{33},
                           size_t{64}, size_t{100}, size_t{1003}}) {
        for (size_t first : {size_t{0}, size_t{3}}) {
          SCOPED_TRACE(std::string(name) + " op " + std::to_string(int(op)) + " n " +
                       std::to_string(n) + " count " + std::to_string(count) + " first " +
                       std::to_string(first));
          std::mt19937 rng(static_cast<unsigned>(n * 1000 + count + first));
          const size_t len = first + count + 5;  // untouched elements on both sides
          std::vector<std::vector<T>> got(n, std::vector<T>(len));
          for (int p = 0; p < n; ++p) {
            for (size_t i = 0; i < len; ++i) got[p][i] = value<T>(rng, p);
          }
          std::vector<std::vector<T>> want = got;
          reference(red, want, first, count);
          std::vector<void*> ptrs(n);
          for (int p = 0; p < n; ++p) ptrs[p] = got[p].data();
          red.reduce_all(ptrs.data(), n, first, count);
          for (int p = 0; p < n; ++p) {
            ASSERT_EQ(std::memcmp(got[p].data(), want[p].data(), len * sizeof(T)), 0)
                << "buffer " << p;
          }
        }
      }
    }
  }
}

TEST(ReduceKernels, ReduceAllEqualsReduce3ThenReduceBitwise) {
  check_type<float>(DType::kFloat32, "float32");
  check_type<double>(DType::kFloat64, "float64");
  check_type<int32_t>(DType::kInt32, "int32");
  check_type<int64_t>(DType::kInt64, "int64");
  check_type<BFloat16>(DType::kBFloat16, "bf16");
}

}  // namespace
}  // namespace dtsim::testing
