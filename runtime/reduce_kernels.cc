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
      return {reduce2<T, Max>, reduce3<T, Max>, divide<T>};
    case ReduceOp::kMin:
      return {reduce2<T, Min>, reduce3<T, Min>, divide<T>};
    default:
      return {reduce2<T, Sum>, reduce3<T, Sum>, divide<T>};
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
