// One core: the causal attention kernel (model/attention.h) forward + backward of one head,
// timed in this thread's CPU time, against the one-core FMA floor.
//
//   attention_step [--seq S] [--head-dim hs] [--reps R] [--floor-gflops G]
//
// (bench/attention_vs_floor.sh passes G from fma_floor.) The work is counted in S x S x hs
// products over the causal half, S (S + 1) / 2 * hs FMAs (2 FLOP) each: forward does 2 of
// them (q k^T, P v), backward 5 (q k^T again to recompute P from the LSE, dO v^T, P^T dO,
// dS k, dS^T q). `floor` is the executed 7 products at G; `floor6` the 6 products a kernel
// keeping the S x S matrix would need (no recomputation): the stricter yardstick.
// Verifies the forward against a double-precision reference on a few rows before timing.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <vector>

#include "bench/step_clock.h"
#include "model/attention.h"
#include "model/rng.h"

using dtsim::bench::median;
using dtsim::bench::seconds;
using namespace dtsim::model;

namespace {

std::vector<float> random(size_t n, uint64_t seed) {
  SplitMix64 rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = rng.uniform(1.0f);
  return v;
}

// max |o - reference| over rows `rows` of causal attention, in double.
double check_rows(int s, int hd, const std::vector<float>& q, const std::vector<float>& k,
                  const std::vector<float>& v, const std::vector<float>& o) {
  double worst = 0;
  for (int i : {0, 1, s / 3, s - 1}) {
    std::vector<double> w(i + 1), acc(hd, 0.0);
    double mx = -1e300, sum = 0;
    for (int j = 0; j <= i; ++j) {
      double dot = 0;
      for (int d = 0; d < hd; ++d) dot += double(q[i * hd + d]) * k[j * hd + d];
      w[j] = dot / std::sqrt(double(hd));
      mx = std::max(mx, w[j]);
    }
    for (int j = 0; j <= i; ++j) sum += std::exp(w[j] - mx);
    for (int j = 0; j <= i; ++j) {
      for (int d = 0; d < hd; ++d) acc[d] += std::exp(w[j] - mx) / sum * v[j * hd + d];
    }
    for (int d = 0; d < hd; ++d) worst = std::max(worst, std::abs(acc[d] - o[i * hd + d]));
  }
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  long s = 256, hd = 64, reps = 200;
  double floor_gflops = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--floor-gflops")) {
      floor_gflops = std::atof(argv[i + 1]);
      continue;
    }
    long* p = !std::strcmp(argv[i], "--seq")        ? &s
              : !std::strcmp(argv[i], "--head-dim") ? &hd
              : !std::strcmp(argv[i], "--reps")     ? &reps
                                                    : nullptr;
    if (!p) {
      std::fprintf(stderr,
                   "attention_step: unknown option '%s' (use --seq/--head-dim/--reps/"
                   "--floor-gflops)\n",
                   argv[i]);
      return 2;
    }
    *p = std::atol(argv[i + 1]);
  }
  if (s < 1 || hd < 1 || hd > kMaxHeadDim || reps < 1) {
    std::fprintf(stderr, "attention_step: need --seq >= 1, 1 <= --head-dim <= %d, --reps >= 1\n",
                 kMaxHeadDim);
    return 2;
  }
  const int S = int(s), H = int(hd);
  const size_t n = size_t(S) * H;
  const auto q = random(n, 1), k = random(n, 2), v = random(n, 3), d_o = random(n, 4);
  std::vector<float> o(n), lse(S), delta(S), dq(n), dk(n), dv(n);
  const AttentionShape a{H, 1.0f / std::sqrt(float(H)), true};
  const QueryBlock qb{q.data(), H, S, 0};
  const KvBlock kb{k.data(), v.data(), H, S, 0};

  attention_forward(a, qb, kb, o.data(), H, lse.data());
  const double err = check_rows(S, H, q, k, v, o);
  if (!(err < 1e-4)) {
    std::fprintf(stderr, "attention_step: forward differs from the reference by %g\n", err);
    return 1;
  }
  std::vector<double> fwd, bwd;
  for (long r = 0; r < reps; ++r) {
    const double t0 = seconds(CLOCK_THREAD_CPUTIME_ID);
    attention_forward(a, qb, kb, o.data(), H, lse.data());
    const double t1 = seconds(CLOCK_THREAD_CPUTIME_ID);
    attention_backward_delta(H, S, o.data(), H, d_o.data(), H, delta.data());
    attention_backward(a, qb, kb, d_o.data(), H, lse.data(), delta.data(), dq.data(), H, dk.data(),
                       dv.data(), H);
    const double t2 = seconds(CLOCK_THREAD_CPUTIME_ID);
    fwd.push_back(t1 - t0);
    bwd.push_back(t2 - t1);
  }
  const double product = double(S) * (S + 1) / 2 * H * 2;  // FLOP of one causal product
  const double f = median(fwd), b = median(bwd), total = f + b;
  std::printf(
      "attention_step: S %d hs %d causal: fwd %.3f ms, bwd %.3f ms, fwd+bwd %.3f ms cpu "
      "(median of %ld), %.1f GFLOP/s executed (7 products, %.1f MFLOP; checksum %.3g)\n",
      S, H, f * 1e3, b * 1e3, total * 1e3, reps, 7 * product / total / 1e9, 7 * product / 1e6,
      double(dq[7] + dk[9] + dv[11]));
  if (floor_gflops > 0) {
    const double floor7 = 7 * product / (floor_gflops * 1e9),
                 floor6 = 6 * product / (floor_gflops * 1e9);
    std::printf(
        "attention_step: FMA floor %.1f GFLOP/s: floor %.3f ms (7 products) -> %.2fx the floor; "
        "floor6 %.3f ms (6 products) -> %.2fx\n",
        floor_gflops, floor7 * 1e3, total / floor7, floor6 * 1e3, total / floor6);
  }
  return 0;
}
