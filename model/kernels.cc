// The elementwise kernels of model/kernels.h (activations, losses, bf16); the linear
// layer's are in model/linear_kernels.cc.
#include "model/kernels.h"

#include <Eigen/Core>
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "model/check.h"
#include "model/parallel.h"

namespace dtsim::model {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluC = 0.044715f;

// Elementwise kernels are split into fixed chunks of this many elements.
constexpr int kElemChunk = 4096;

template <class Fn>
void for_elements(size_t n, Fn&& fn) {
  const int chunks = static_cast<int>((n + kElemChunk - 1) / kElemChunk);
  for_row_blocks(chunks, int64_t{kElemChunk} * 8, [&](int c0, int c1) {
    fn(static_cast<size_t>(c0) * kElemChunk, std::min(n, static_cast<size_t>(c1) * kElemChunk));
  });
}

// A pack of 16 floats: a whole number of SIMD registers for SSE, AVX and AVX-512. The
// elementwise kernels compute every element, the tail's too, through the same aligned
// fixed-size Eigen expression (packet math only, no scalar libm call), so y[i] depends on
// x[i] alone, never on the element's position, the buffer's alignment or the chunking.
constexpr int kPack = 16;
using Pack = Eigen::Array<float, kPack, 1>;

#ifdef EIGEN_VECTORIZE
// Eigen's widest float packet: Packet8f under AVX, Packet16f under AVX-512.
using P = Eigen::internal::packet_traits<float>::type;
constexpr int kLanes = sizeof(P) / sizeof(float);
static_assert(kPack % kLanes == 0);

// e^v through Eigen's generic pexp_float, the algorithm its pexp runs for Packet4f and
// Packet8f. Its pexp<Packet16f> is another (AVX-512 only), so an AVX-512 build calling
// pexp, or Array::exp(), rounded GELU and softmax differently from an AVX2 build; with
// pexp_float on every packet the two give the same bits.
P packet_exp(P v) { return Eigen::internal::pexp_float(v); }

Pack pack_exp(const Pack& v) {
  Pack out;
  for (int i = 0; i < kPack; i += kLanes) {
    Eigen::internal::pstoreu(out.data() + i, packet_exp(Eigen::internal::ploadu<P>(v.data() + i)));
  }
  return out;
}
#else
Pack pack_exp(const Pack& v) { return v.exp(); }
#endif

Pack load(const float* p, int n) {
  Pack v;
  if (n == kPack) {
    v = Eigen::Map<const Pack>(p);
  } else {
    v.setZero();
    std::copy(p, p + n, v.data());
  }
  return v;
}

void store(const Pack& v, float* p, int n) {
  if (n == kPack) {
    Eigen::Map<Pack> dst(p);
    dst = v;
  } else {
    std::copy(v.data(), v.data() + n, p);
  }
}

// Calls fn(i, count) for the packs of [0, n), count = kPack except for the tail.
template <class Fn>
void for_packs(size_t n, Fn&& fn) {
  for_elements(n, [&](size_t i0, size_t i1) {
    for (size_t i = i0; i < i1; i += kPack)
      fn(i, static_cast<int>(std::min<size_t>(kPack, i1 - i)));
  });
}

// GELU (tanh form) is evaluated as x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3):
// 0.5 (1 + tanh u) = 1 / (1 + e^{-2u}), so one vectorised exp (Eigen's packet exp, no libm
// call) gives both the forward and, with e s^2 = s (1 - s), the derivative
//   gelu'(x) = s + 2 x u'(x) e s^2,  s = 1 / (1 + e),  e = e^{-2u}.
// Accuracy against a double-precision evaluation: see tests/model/kernels_test.cc.
Pack gelu_exp(const Pack& v) { return pack_exp((-2.0f * kSqrt2OverPi) * (v + kGeluC * v.cube())); }

}  // namespace

void gelu_forward(std::span<const float> x, std::span<float> y) {
  DTSIM_CHECK(y.size() >= x.size());
  for_packs(x.size(), [&](size_t i, int n) {
    const Pack v = load(x.data() + i, n);
    const Pack out = v / (1.0f + gelu_exp(v));
    store(out, y.data() + i, n);
  });
}

namespace {

// gelu'(v) from e = gelu_exp(v).
[[gnu::always_inline]] inline Pack gelu_derivative(const Pack& v, const Pack& e) {
  const Pack s = 1.0f / (1.0f + e);
  const Pack du = (2.0f * kSqrt2OverPi) * (1.0f + (3.0f * kGeluC) * v.square());
  // e is inf below x ~ -10.4, where the formula's e * s is inf * 0: gelu' is 0 there.
  return (e < std::numeric_limits<float>::infinity())
      .select(s + v * du * (e * s) * s, Pack::Zero());
}

// dx = base + dy * gelu'(x), base = dx (kAccumulate) or +0 (so a -0 product reads +0, as
// it would added into zeros).
template <bool kAccumulate>
void gelu_backward_impl(std::span<const float> x, std::span<const float> dy, std::span<float> dx) {
  DTSIM_CHECK(dy.size() >= x.size() && dx.size() >= x.size());
  for_packs(x.size(), [&](size_t i, int n) {
    const Pack v = load(x.data() + i, n), g = load(dy.data() + i, n);
    const Pack d = gelu_derivative(v, gelu_exp(v));
    const Pack base = kAccumulate ? load(dx.data() + i, n) : Pack::Zero();
    const Pack out = base + g * d;
    store(out, dx.data() + i, n);
  });
}

}  // namespace

void gelu_backward(std::span<const float> x, std::span<const float> dy, std::span<float> dx) {
  gelu_backward_impl<true>(x, dy, dx);
}

void gelu_grad(std::span<const float> x, std::span<const float> dy, std::span<float> dx) {
  gelu_backward_impl<false>(x, dy, dx);
}

#ifdef EIGEN_VECTORIZE
namespace {

// gelu_exp, gelu_forward's quotient and gelu_derivative on kN registers of P, op for op
// (packet_exp; with fp contraction off every other op rounds as the Array expressions do),
// without the Arrays' round trips through the stack. One register's ops form a long chain
// of dependent steps; kN independent chains, interleaved step by step, keep the pipes busy
// where the out-of-order window alone did not.
template <int kN>
[[gnu::always_inline]] inline void gelu_packets(const P* v, P* y, P* d) {
  using namespace Eigen::internal;
  const P one = pset1<P>(1.0f);
  P e[kN];
  for (int u = 0; u < kN; ++u) {
    const P cube = pmul(pmul(v[u], v[u]), v[u]);
    e[u] = pmul(pset1<P>(-2.0f * kSqrt2OverPi), padd(v[u], pmul(pset1<P>(kGeluC), cube)));
  }
  for (int u = 0; u < kN; ++u) e[u] = packet_exp(e[u]);
  for (int u = 0; u < kN; ++u) {
    const P s = pdiv(one, padd(one, e[u]));
    const P du = pmul(pset1<P>(2.0f * kSqrt2OverPi),
                      padd(one, pmul(pset1<P>(3.0f * kGeluC), pmul(v[u], v[u]))));
    const P g = padd(s, pmul(pmul(pmul(v[u], du), pmul(e[u], s)), s));
    const P finite = pcmp_lt(e[u], pset1<P>(std::numeric_limits<float>::infinity()));
    y[u] = pdiv(v[u], padd(one, e[u]));
    d[u] = pand(finite, g);
  }
}

// Calls fn(i, n) for the kLanes-float groups of [0, n), n = kLanes except for the tail.
template <class Fn>
void for_lanes(size_t n, Fn&& fn) {
  for_elements(n, [&](size_t i0, size_t i1) {
    for (size_t i = i0; i < i1; i += kLanes)
      fn(i, static_cast<int>(std::min<size_t>(kLanes, i1 - i)));
  });
}

P load_p(const float* p, int n) {
  if (n == kLanes) return Eigen::internal::ploadu<P>(p);
  alignas(64) float v[kLanes] = {};
  std::copy(p, p + n, v);
  return Eigen::internal::pload<P>(v);
}

void store_p(P v, float* p, int n) {
  if (n == kLanes) return Eigen::internal::pstoreu(p, v);
  alignas(64) float t[kLanes];
  Eigen::internal::pstore(t, v);
  std::copy(t, t + n, p);
}

}  // namespace

void gelu_forward_keep_grad(std::span<const float> x, std::span<float> y, std::span<float> d) {
  DTSIM_CHECK(y.size() >= x.size() && d.size() >= x.size());
  constexpr int kGroup = 4;  // registers per gelu_packets call
  for_elements(x.size(), [&](size_t i0, size_t i1) {
    size_t i = i0;
    for (; i + kGroup * kLanes <= i1; i += kGroup * kLanes) {
      P v[kGroup], gy[kGroup], gd[kGroup];
      for (int u = 0; u < kGroup; ++u) v[u] = Eigen::internal::ploadu<P>(x.data() + i + u * kLanes);
      gelu_packets<kGroup>(v, gy, gd);  // x read before d, which may alias it, is written
      for (int u = 0; u < kGroup; ++u) {
        Eigen::internal::pstoreu(y.data() + i + u * kLanes, gy[u]);
        Eigen::internal::pstoreu(d.data() + i + u * kLanes, gd[u]);
      }
    }
    for (; i < i1; i += kLanes) {
      const int n = static_cast<int>(std::min<size_t>(kLanes, i1 - i));
      P v = load_p(x.data() + i, n), gy, gd;
      gelu_packets<1>(&v, &gy, &gd);
      store_p(gy, y.data() + i, n);
      store_p(gd, d.data() + i, n);
    }
  });
}

void gelu_grad_from_kept(std::span<const float> d, std::span<const float> dy, std::span<float> dx) {
  using namespace Eigen::internal;
  DTSIM_CHECK(dy.size() >= d.size() && dx.size() >= d.size());
  for_lanes(d.size(), [&](size_t i, int n) {
    const P prod = pmul(load_p(dy.data() + i, n), load_p(d.data() + i, n));
    store_p(padd(pset1<P>(0.0f), prod), dx.data() + i, n);
  });
}
#else
void gelu_forward_keep_grad(std::span<const float> x, std::span<float> y, std::span<float> d) {
  DTSIM_CHECK(y.size() >= x.size() && d.size() >= x.size());
  for_packs(x.size(), [&](size_t i, int n) {
    const Pack v = load(x.data() + i, n);  // read before d, which may alias x, is written
    const Pack e = gelu_exp(v);
    store(v / (1.0f + e), y.data() + i, n);
    store(gelu_derivative(v, e), d.data() + i, n);
  });
}

void gelu_grad_from_kept(std::span<const float> d, std::span<const float> dy, std::span<float> dx) {
  DTSIM_CHECK(dy.size() >= d.size() && dx.size() >= d.size());
  for_packs(d.size(), [&](size_t i, int n) {
    const Pack out = Pack::Zero() + load(dy.data() + i, n) * load(d.data() + i, n);
    store(out, dx.data() + i, n);
  });
}
#endif

void relu_forward(std::span<const float> x, std::span<float> y) {
  DTSIM_CHECK(y.size() >= x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void relu_backward(std::span<const float> x, std::span<const float> dy, std::span<float> dx) {
  DTSIM_CHECK(dy.size() >= x.size() && dx.size() >= x.size());
  for (size_t i = 0; i < x.size(); ++i) dx[i] += x[i] > 0.0f ? dy[i] : 0.0f;
}

float mse_loss_forward(std::span<const float> y, std::span<const float> t, int batch, int cols) {
  DTSIM_CHECK(y.size() >= size_t(batch) * cols && t.size() >= size_t(batch) * cols);
  double sum = 0.0;
  for (size_t i = 0; i < size_t(batch) * cols; ++i) {
    const double d = double(y[i]) - double(t[i]);
    sum += d * d;
  }
  return static_cast<float>(sum / cols / batch);
}

void mse_loss_backward(std::span<const float> y, std::span<const float> t, int batch, int cols,
                       float grad_scale, std::span<float> dy) {
  DTSIM_CHECK(dy.size() >= size_t(batch) * cols);
  const float k = grad_scale * 2.0f / static_cast<float>(cols);
  for (size_t i = 0; i < size_t(batch) * cols; ++i) dy[i] += k * (y[i] - t[i]);
}

void softmax_forward(std::span<const float> logits, std::span<float> probs, int batch,
                     int classes) {
  DTSIM_CHECK(logits.size() >= size_t(batch) * classes && probs.size() >= logits.size());
  for (int r = 0; r < batch; ++r) {
    const float* z = logits.data() + size_t(r) * classes;
    float* p = probs.data() + size_t(r) * classes;
    const float m = *std::max_element(z, z + classes);
    for (int c = 0; c < classes; c += kPack) {
      const int n = std::min(kPack, classes - c);
      store(pack_exp(load(z + c, n) - m), p + c, n);
    }
    float sum = 0.0f;
    for (int c = 0; c < classes; ++c) sum += p[c];  // in order: independent of the ISA
    const float inv = 1.0f / sum;
    for (int c = 0; c < classes; ++c) p[c] *= inv;
  }
}

float exp_scaled_shifted(float* x, int n, float scale, float shift) {
  Pack sum = Pack::Zero();
  float tail = 0.0f;
  for (int c = 0; c < n; c += kPack) {
    const int k = std::min(kPack, n - c);
    const Pack e = pack_exp(load(x + c, k) * scale - shift);
    store(e, x + c, k);
    if (k == kPack) {
      sum += e;
    } else {
      for (int i = 0; i < k; ++i) tail += x[c + i];
    }
  }
  return sum.sum() + tail;
}

float max_of(const float* x, int n) {
  DTSIM_CHECK(n >= 1);
  return Eigen::Map<const Eigen::ArrayXf>(x, n).maxCoeff();
}

void softmax_backward(std::span<const float> probs, std::span<const float> dprobs,
                      std::span<float> dlogits, int batch, int classes) {
  for (int r = 0; r < batch; ++r) {
    const float* p = probs.data() + size_t(r) * classes;
    const float* dp = dprobs.data() + size_t(r) * classes;
    float* dz = dlogits.data() + size_t(r) * classes;
    float dot = 0.0f;
    for (int c = 0; c < classes; ++c) dot += p[c] * dp[c];
    for (int c = 0; c < classes; ++c) dz[c] += p[c] * (dp[c] - dot);
  }
}

float softmax_cross_entropy_forward(std::span<const float> logits, std::span<const int32_t> labels,
                                    std::span<float> probs, int batch, int classes) {
  DTSIM_CHECK(labels.size() >= size_t(batch));
  softmax_forward(logits, probs, batch, classes);
  double sum = 0.0;
  for (int r = 0; r < batch; ++r) {
    const int32_t label = labels[r];
    DTSIM_CHECK(label >= 0 && label < classes);
    // -log p computed from the logits (log-sum-exp) so a tiny probability stays finite.
    const float* z = logits.data() + size_t(r) * classes;
    const double m = *std::max_element(z, z + classes);
    double s = 0.0;
    for (int c = 0; c < classes; ++c) s += std::exp(double(z[c]) - m);
    sum += m + std::log(s) - double(z[label]);
  }
  return static_cast<float>(sum / batch);
}

void softmax_cross_entropy_backward(std::span<const float> probs, std::span<const int32_t> labels,
                                    int batch, int classes, float grad_scale,
                                    std::span<float> dlogits) {
  DTSIM_CHECK(dlogits.size() >= size_t(batch) * classes);
  for (int r = 0; r < batch; ++r) {
    const float* p = probs.data() + size_t(r) * classes;
    float* dz = dlogits.data() + size_t(r) * classes;
    for (int c = 0; c < classes; ++c) {
      dz[c] += grad_scale * (p[c] - (c == labels[r] ? 1.0f : 0.0f));
    }
  }
}

void bf16_widen(std::span<const BFloat16> in, std::span<float> out) {
  DTSIM_CHECK(out.size() >= in.size());
  const uint16_t* src = reinterpret_cast<const uint16_t*>(in.data());
  uint32_t* dst = reinterpret_cast<uint32_t*>(out.data());
  for (size_t i = 0; i < in.size(); ++i) dst[i] = uint32_t{src[i]} << 16;
}

void bf16_accumulate(std::span<BFloat16> acc, std::span<const float> add) {
  DTSIM_CHECK(add.size() >= acc.size());
  static_assert(sizeof(BFloat16) == sizeof(uint16_t));
  uint16_t* a = reinterpret_cast<uint16_t*>(acc.data());
  for (size_t i = 0; i < acc.size(); ++i) {
    const float sum = std::bit_cast<float>(uint32_t{a[i]} << 16) + add[i];
    const uint32_t u = std::bit_cast<uint32_t>(sum);
    // BFloat16::round_from_float without the branch, so the loop vectorises.
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const uint32_t nan = (u >> 16) | 0x0040u;
    a[i] = static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
  }
}

}  // namespace dtsim::model
