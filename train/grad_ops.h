// Element-wise helpers over gradient and parameter slices in either storage type (fp32, or
// bf16 under mixed precision), written once so that a strategy and its reference do the same
// float operations in the same order: that is what makes DDP == accumulation bit for bit.
#pragma once

#include <cstddef>
#include <span>

#include "common/bf16.h"
#include "model/param_store.h"

namespace dtsim::train {

inline float widen(float x) { return x; }
inline float widen(BFloat16 x) { return static_cast<float>(x); }
template <class T>
T narrow(float x) {
  return T(x);
}

// Calls fn(params, grads) with the store's buffers in their storage type (float or BFloat16).
template <class Fn>
void with_buffers(model::ParamStore& store, Fn&& fn) {
  if (store.precision() == model::Precision::kFp32) {
    fn(store.params(), store.grads());
  } else {
    fn(store.params_bf16(), store.grads_bf16());
  }
}

// acc[i] = acc[i] + x[i], summed in fp32 and rounded once to T (as the runtime's reduction).
template <class T>
void add_into(std::span<T> acc, std::span<const T> x) {
  for (size_t i = 0; i < acc.size(); ++i) acc[i] = narrow<T>(widen(acc[i]) + widen(x[i]));
}

// acc[i] = 0 + x[i] in fp32, rounded once to T: bitwise add_into on a zero-filled acc (0 + -0
// is +0), without the fill and without reading acc.
template <class T>
void write_into(std::span<T> acc, std::span<const T> x) {
  for (size_t i = 0; i < acc.size(); ++i) acc[i] = narrow<T>(0.0f + widen(x[i]));
}

// g[i] = g[i] / n: the "divide by N" after a data-parallel sum.
template <class T>
void divide(std::span<T> g, int n) {
  const float d = static_cast<float>(n);
  for (T& v : g) v = narrow<T>(widen(v) / d);
}

}  // namespace dtsim::train
