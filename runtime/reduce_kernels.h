// Element-wise reduction kernels, looked up once per collective (not per message).
#pragma once

#include <cstddef>

#include "runtime/types.h"

namespace dtsim {

// acc[i] = acc[i] op in[i] for i < n; `op` is kSum for kAvg (the division comes last).
using ReduceFn = void (*)(void* acc, const void* in, size_t n);
// out[i] = a[i] op b[i]; lets an algorithm reduce into a third buffer without a copy.
using Reduce3Fn = void (*)(void* out, const void* a, const void* b, size_t n);
// Elements [first, first + count) of the n buffers bufs[0..n-1] (n >= 1): each becomes
// bufs[0][i] op bufs[1][i] op ... op bufs[n-1][i], reduced left to right (bitwise what
// reduce3 then reduce of bufs 2..n-1 give), written into all n buffers; every buffer is
// read once and written once. The buffers may not overlap in that range. Safe for
// concurrent calls on disjoint ranges.
using ReduceAllFn = void (*)(void* const* bufs, int n, size_t first, size_t count);
// x[i] /= divisor (kAvg's last step).
using ScaleFn = void (*)(void* x, size_t n, int divisor);

struct Reducer {
  ReduceFn reduce;
  Reduce3Fn reduce3;
  ReduceAllFn reduce_all;
  ScaleFn divide;
};

// The kernels for (dtype, op); throws UsageError for kByte, which cannot be reduced.
Reducer reducer_for(DType t, ReduceOp op);

}  // namespace dtsim
