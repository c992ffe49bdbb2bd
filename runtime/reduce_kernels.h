// Element-wise reduction kernels, looked up once per collective (not per message).
#pragma once

#include <cstddef>

#include "runtime/types.h"

namespace dtsim {

// acc[i] = acc[i] op in[i] for i < n; `op` is kSum for kAvg (the division comes last).
using ReduceFn = void (*)(void* acc, const void* in, size_t n);
// out[i] = a[i] op b[i]; lets an algorithm reduce into a third buffer without a copy.
using Reduce3Fn = void (*)(void* out, const void* a, const void* b, size_t n);
// x[i] /= divisor (kAvg's last step).
using ScaleFn = void (*)(void* x, size_t n, int divisor);

struct Reducer {
  ReduceFn reduce;
  Reduce3Fn reduce3;
  ScaleFn divide;
};

// The kernels for (dtype, op); throws UsageError for kByte, which cannot be reduced.
Reducer reducer_for(DType t, ReduceOp op);

}  // namespace dtsim
