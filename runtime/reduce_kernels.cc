#include "runtime/reduce_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "common/bf16.h"

namespace dtsim {
namespace {

// Arithmetic is done in T, except bf16, which is done in float and rounded back (RNE).
template <class T>
struct Arith {
  using Wide = T;
  static Wide widen(T x) { return x; }
  static T narrow(Wide x) { return x; }
};
template <>
struct Arith<BFloat16> {
  using Wide = float;
  static float widen(BFloat16 x) { return static_cast<float>(x); }
  static BFloat16 narrow(float x) { return BFloat16(x); }
};

struct Sum {
  template <class W>
  static W apply(W a, W b) {
    return a + b;
  }
};
// Max and Min follow torch.maximum / torch.minimum: a NaN anywhere gives NaN, and
// max(-0, +0) is +0 (min: -0), in either order. std::max(a, b) is not commutative on those
// values, and recursive doubling computes a op b on one partner and b op a on the other,
// so ranks would end with different bits.
template <class W>
bool pick_second(W a, W b, bool is_max) {
  if constexpr (std::is_floating_point_v<W>) {
    if (a != a) return false;
    if (b != b) return true;
    if (a == b) return std::signbit(a) == is_max;
  }
  return is_max ? a < b : b < a;
}
struct Max {
  template <class W>
  static W apply(W a, W b) {
    return pick_second(a, b, true) ? b : a;
  }
};
struct Min {
  template <class W>
  static W apply(W a, W b) {
    return pick_second(a, b, false) ? b : a;
  }
};

template <class T, class Op>
void reduce2(void* acc, const void* in, size_t n) {
  T* a = static_cast<T*>(acc);
  const T* b = static_cast<const T*>(in);
  for (size_t i = 0; i < n; ++i) {
    a[i] = Arith<T>::narrow(Op::apply(Arith<T>::widen(a[i]), Arith<T>::widen(b[i])));
  }
}

template <class T, class Op>
void reduce3(void* out, const void* x, const void* y, size_t n) {
  T* o = static_cast<T*>(out);
  const T* a = static_cast<const T*>(x);
  const T* b = static_cast<const T*>(y);
  for (size_t i = 0; i < n; ++i) {
    o[i] = Arith<T>::narrow(Op::apply(Arith<T>::widen(a[i]), Arith<T>::widen(b[i])));
  }
}

// reduce_all, one strip at a time: the strip's running result stays in registers while
// the n buffers stream past, so each buffer is read once and written once.
constexpr size_t kStripBytes = 128;

template <class T, class Op>
void reduce_all_scalar(T* const* b, int n, size_t i, size_t len) {
  constexpr size_t kStrip = kStripBytes / sizeof(T);
  for (size_t done = 0; done < len; done += kStrip, i += kStrip) {
    const size_t m = std::min(kStrip, len - done);
    T acc[kStrip];
    for (size_t j = 0; j < m; ++j) acc[j] = b[0][i + j];
    for (int p = 1; p < n; ++p) {
      const T* src = b[p] + i;
      for (size_t j = 0; j < m; ++j) {
        acc[j] = Arith<T>::narrow(Op::apply(Arith<T>::widen(acc[j]), Arith<T>::widen(src[j])));
      }
    }
    for (int p = 0; p < n; ++p) std::copy(acc, acc + m, b[p] + i);
  }
}

template <class T, class Op>
void reduce_all(void* const* bufs, int n, size_t first, size_t count) {
  T* const* b = reinterpret_cast<T* const*>(bufs);
  if constexpr (std::is_same_v<Op, Sum> && std::is_arithmetic_v<T>) {
    // Sums of the built-in types in explicit 32-byte vectors (one AVX register, or two SSE
    // halves): lane-wise the same additions in the same order as the scalar loop.
    typedef T Vec __attribute__((vector_size(32)));
    typedef T VecU __attribute__((vector_size(32), aligned(alignof(T)), may_alias));
    constexpr size_t kLanes = sizeof(Vec) / sizeof(T);
    constexpr size_t kStrip = kStripBytes / sizeof(Vec);
    const size_t end = first + count;
    // Scalar up to a 32-byte boundary of bufs[0] (and of every buffer that shares its
    // alignment, as malloc's do): a vector that straddles two cache lines costs two.
    const auto mis = reinterpret_cast<uintptr_t>(b[0] + first) % sizeof(Vec);
    const size_t peel = mis % sizeof(T) ? 0 : (sizeof(Vec) - mis) % sizeof(Vec) / sizeof(T);
    reduce_all_scalar<T, Op>(b, n, first, std::min(peel, count));
    size_t i = first + std::min(peel, count);
    for (; i + kStrip * kLanes <= end; i += kStrip * kLanes) {
      Vec acc[kStrip];
      for (size_t v = 0; v < kStrip; ++v)
        acc[v] = *reinterpret_cast<const VecU*>(b[0] + i + v * kLanes);
      for (int p = 1; p < n; ++p) {
        const T* src = b[p] + i;
        for (size_t v = 0; v < kStrip; ++v)
          acc[v] += *reinterpret_cast<const VecU*>(src + v * kLanes);
      }
      for (int p = 0; p < n; ++p) {
        T* dst = b[p] + i;
        for (size_t v = 0; v < kStrip; ++v) *reinterpret_cast<VecU*>(dst + v * kLanes) = acc[v];
      }
    }
    reduce_all_scalar<T, Op>(b, n, i, end - i);
  } else {
    reduce_all_scalar<T, Op>(b, n, first, count);
  }
}

template <class T>
void divide(void* x, size_t n, int divisor) {
  T* a = static_cast<T*>(x);
  using W = typename Arith<T>::Wide;
  const W d = static_cast<W>(divisor);
  for (size_t i = 0; i < n; ++i) a[i] = Arith<T>::narrow(Arith<T>::widen(a[i]) / d);
}

template <class T>
Reducer make(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMax:
      return {reduce2<T, Max>, reduce3<T, Max>, reduce_all<T, Max>, divide<T>};
    case ReduceOp::kMin:
      return {reduce2<T, Min>, reduce3<T, Min>, reduce_all<T, Min>, divide<T>};
    default:
      return {reduce2<T, Sum>, reduce3<T, Sum>, reduce_all<T, Sum>, divide<T>};
  }
}

}  // namespace

Reducer reducer_for(DType t, ReduceOp op) {
  switch (t) {
    case DType::kFloat32:
      return make<float>(op);
    case DType::kFloat64:
      return make<double>(op);
    case DType::kInt32:
      return make<int32_t>(op);
    case DType::kInt64:
      return make<int64_t>(op);
    case DType::kBFloat16:
      return make<BFloat16>(op);
    case DType::kByte:
      break;
  }
  throw UsageError(
      "cannot reduce raw bytes: pass a typed buffer (float, double, int32, int64, bf16)");
}

}  // namespace dtsim
