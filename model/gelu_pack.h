// GELU (tanh form) on a pack of 16 floats, shared by the elementwise kernels (kernels.cc) and
// the GEMM epilogues that fuse it (gemm_avx2.cc), so fused and unfused give the same bits.
//
// gelu(x) = x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3): 0.5 (1 + tanh u) =
// 1 / (1 + e^{-2u}), so one vectorised exp (Eigen's packet exp, no libm call) gives both the
// forward and, with e s^2 = s (1 - s), the derivative
//   gelu'(x) = s + 2 x u'(x) e s^2,  s = 1 / (1 + e),  e = e^{-2u}.
// Every lane is computed by the same packet instructions, so an element's result depends
// on its value alone, never on its position in the pack. Accuracy against a double
// evaluation: tests/model/elementwise_accuracy_test.cc. Thread safety: pure functions.
#pragma once

#include <Eigen/Core>

namespace dtsim::model::gelu_pack {

inline constexpr int kPack = 16;  // a whole number of SSE, AVX and AVX-512 registers
using Pack = Eigen::Array<float, kPack, 1>;

inline constexpr float kSqrt2OverPi = 0.7978845608028654f;
inline constexpr float kGeluC = 0.044715f;

// e^{-2u(x)}.
inline Pack gelu_exp(const Pack& v) {
  return ((-2.0f * kSqrt2OverPi) * (v + kGeluC * v.cube())).exp();
}

// gelu(v).
inline Pack gelu(const Pack& v) { return v / (1.0f + gelu_exp(v)); }

// g * gelu'(v): the gradient through GELU of an upstream gradient g.
inline Pack gelu_grad(const Pack& v, const Pack& g) {
  const Pack e = gelu_exp(v);
  const Pack s = 1.0f / (1.0f + e);
  const Pack du = (2.0f * kSqrt2OverPi) * (1.0f + (3.0f * kGeluC) * v.square());
  return g * (s + v * du * (e * s) * s);
}

// The first n (<= kPack) floats at p, zero-padded; and the first n lanes of v to p.
inline Pack load(const float* p, int n) {
  Pack v;
  if (n == kPack) {
    v = Eigen::Map<const Pack>(p);
  } else {
    v.setZero();
    for (int i = 0; i < n; ++i) v[i] = p[i];
  }
  return v;
}

inline void store(const Pack& v, float* p, int n) {
  if (n == kPack) {
    Eigen::Map<Pack> dst(p);
    dst = v;
  } else {
    for (int i = 0; i < n; ++i) p[i] = v[i];
  }
}

}  // namespace dtsim::model::gelu_pack
