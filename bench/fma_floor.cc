// The one-core FMA floor: the fp32 FLOP/s one thread reaches on independent fused
// multiply-adds held in registers, for each vector width this build has (AVX-512 and AVX2
// FMA with DTSIM_NATIVE on a machine that has them, SSE2 mul + add otherwise), and the
// time the MLP step of bench/torch_compare.sh would take at the fastest one's rate.
//
//   fma_floor [--dim D] [--hidden H] [--out O] [--batch B]
//
// The MLP step (one block, input gradient of block 0 not needed) is
//   B (10 D H + 6 D O) FLOP: forward 2B(2DH + DO), backward 2B(2DH) + 2B(DH) + 2B(2DO).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

#include <immintrin.h>

namespace {

// One instruction set's vector: kLanes floats, kFlopPerOp FLOP per op (FMA: 2; SSE2's
// multiply and add: 2 in two instructions).
#if defined(__AVX512F__)
struct Avx512 {
  using Vec = __m512;
  static constexpr int kLanes = 16, kFlopPerOp = 2;
  static constexpr const char* kName = "AVX-512 FMA (16 lanes)";
  static Vec set(float v) { return _mm512_set1_ps(v); }
  static Vec op(Vec acc, Vec a, Vec b) { return _mm512_fmadd_ps(a, b, acc); }
  static float sum(Vec v) { return _mm512_reduce_add_ps(v); }
};
#endif
#if defined(__FMA__) && defined(__AVX__)
struct Avx2 {
  using Vec = __m256;
  static constexpr int kLanes = 8, kFlopPerOp = 2;
  static constexpr const char* kName = "AVX2 FMA (8 lanes)";
  static Vec set(float v) { return _mm256_set1_ps(v); }
  static Vec op(Vec acc, Vec a, Vec b) { return _mm256_fmadd_ps(a, b, acc); }
  static float sum(Vec v) {
    alignas(32) float f[8];
    _mm256_store_ps(f, v);
    float s = 0;
    for (float x : f) s += x;
    return s;
  }
};
#endif
struct Sse2 {
  using Vec = __m128;
  static constexpr int kLanes = 4, kFlopPerOp = 2;  // a multiply and an add
  static constexpr const char* kName = "SSE2 mul+add (4 lanes)";
  static Vec set(float v) { return _mm_set1_ps(v); }
  static Vec op(Vec acc, Vec a, Vec b) { return _mm_add_ps(acc, _mm_mul_ps(a, b)); }
  static float sum(Vec v) {
    alignas(16) float f[4];
    _mm_store_ps(f, v);
    return f[0] + f[1] + f[2] + f[3];
  }
};

constexpr int kAcc = 12;  // independent chains: covers 4-5 cycle latency x 2 pipes

// CPU time of this thread: the floor is what the core does while it runs us, so other
// programs on a shared machine do not lower it.
double thread_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// Runs `iters` rounds of kAcc vector ops; returns seconds. The accumulators are named
// variables: GCC 12 kept an array of __m512 on the stack and stored it every round, which
// halved the AVX-512 rate.
template <class Isa>
double run(long iters, float* sink) {
  using Vec = typename Isa::Vec;
  static_assert(kAcc == 12);
  Vec c0 = Isa::set(0.000f), c1 = Isa::set(0.001f), c2 = Isa::set(0.002f), c3 = Isa::set(0.003f);
  Vec c4 = Isa::set(0.004f), c5 = Isa::set(0.005f), c6 = Isa::set(0.006f), c7 = Isa::set(0.007f);
  Vec c8 = Isa::set(0.008f), c9 = Isa::set(0.009f), c10 = Isa::set(0.010f), c11 = Isa::set(0.011f);
  const Vec a = Isa::set(0.999999f), b = Isa::set(1e-7f);
  const double t0 = thread_seconds();
  for (long it = 0; it < iters; ++it) {
    c0 = Isa::op(c0, a, b), c1 = Isa::op(c1, a, b), c2 = Isa::op(c2, a, b);
    c3 = Isa::op(c3, a, b), c4 = Isa::op(c4, a, b), c5 = Isa::op(c5, a, b);
    c6 = Isa::op(c6, a, b), c7 = Isa::op(c7, a, b), c8 = Isa::op(c8, a, b);
    c9 = Isa::op(c9, a, b), c10 = Isa::op(c10, a, b), c11 = Isa::op(c11, a, b);
    asm volatile("" : "+v"(c0), "+v"(c5), "+v"(c11));
  }
  const double t1 = thread_seconds();
  for (Vec c : {c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11}) *sink += Isa::sum(c);
  return t1 - t0;
}

// GFLOP/s of Isa's ops on one thread, best of 7 runs.
template <class Isa>
double gflops(float* sink) {
  const long iters = 20'000'000 * 8 / Isa::kLanes;
  double best = 1e30;
  for (int rep = 0; rep < 7; ++rep) best = std::min(best, run<Isa>(iters, sink));
  return double(iters) * kAcc * Isa::kLanes * Isa::kFlopPerOp / best / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  long dim = 256, hidden = 1024, out = 4, batch = 64;
  for (int i = 1; i + 1 < argc; i += 2) {
    long* p = !std::strcmp(argv[i], "--dim")      ? &dim
              : !std::strcmp(argv[i], "--hidden") ? &hidden
              : !std::strcmp(argv[i], "--out")    ? &out
              : !std::strcmp(argv[i], "--batch")  ? &batch
                                                  : nullptr;
    if (!p) {
      std::fprintf(stderr, "fma_floor: unknown option '%s' (use --dim/--hidden/--out/--batch)\n",
                   argv[i]);
      return 2;
    }
    *p = std::atol(argv[i + 1]);
  }
  // Every instruction set the build has: the widest is not always the fastest (a core
  // with one 512-bit FMA pipe at a lower clock runs AVX-512 slower than two AVX2 pipes).
  float sink = 0;
  double best = 0;
  const char* best_isa = "";
  auto measure = [&](const char* name, double g) {
    std::printf("fma_floor: %.1f GFLOP/s on one thread, %s (thread CPU time, best of 7)\n", g,
                name);
    if (g > best) best = g, best_isa = name;
  };
#if defined(__AVX512F__)
  measure(Avx512::kName, gflops<Avx512>(&sink));
#endif
#if defined(__FMA__) && defined(__AVX__)
  measure(Avx2::kName, gflops<Avx2>(&sink));
#else
  measure(Sse2::kName, gflops<Sse2>(&sink));
#endif
  const double step_flop = double(batch) * (10.0 * dim * hidden + 6.0 * dim * out);
  std::printf(
      "fma_floor: MLP step D %ld H %ld O %ld B %ld = %.1f MFLOP -> floor %.3f ms (%s, "
      "checksum %.3g)\n",
      dim, hidden, out, batch, step_flop / 1e6, step_flop / (best * 1e9) * 1e3, best_isa,
      double(sink));
  return 0;
}
