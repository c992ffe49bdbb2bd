// The one-core FMA floor: the fp32 FLOP/s one thread reaches on independent fused
// multiply-adds held in registers (the widest vectors this build has: AVX2/FMA with
// DTSIM_NATIVE on this machine, SSE2 mul + add otherwise), and the time the MLP step of
// bench/torch_compare.sh would take at that rate.
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

#if defined(__FMA__) && defined(__AVX__)
#include <immintrin.h>
using Vec = __m256;
constexpr int kLanes = 8;
constexpr int kFlopPerOp = 2;
constexpr const char* kIsa = "AVX2 FMA (8 lanes)";
inline Vec vset(float v) { return _mm256_set1_ps(v); }
inline Vec vop(Vec acc, Vec a, Vec b) { return _mm256_fmadd_ps(a, b, acc); }
inline float vsum(Vec v) {
  alignas(32) float f[8];
  _mm256_store_ps(f, v);
  float s = 0;
  for (float x : f) s += x;
  return s;
}
#else
#include <emmintrin.h>
using Vec = __m128;
constexpr int kLanes = 4;
constexpr int kFlopPerOp = 2;  // a multiply and an add
constexpr const char* kIsa = "SSE2 mul+add (4 lanes)";
inline Vec vset(float v) { return _mm_set1_ps(v); }
inline Vec vop(Vec acc, Vec a, Vec b) { return _mm_add_ps(acc, _mm_mul_ps(a, b)); }
inline float vsum(Vec v) {
  alignas(16) float f[4];
  _mm_store_ps(f, v);
  return f[0] + f[1] + f[2] + f[3];
}
#endif

namespace {

constexpr int kAcc = 12;  // independent chains: covers 4-5 cycle latency x 2 pipes

// CPU time of this thread: the floor is what the core does while it runs us, so other
// programs on a shared machine do not lower it.
double thread_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// Runs `iters` rounds of kAcc vector FMAs; returns seconds.
double run(long iters, float* sink) {
  Vec acc[kAcc];
  for (int i = 0; i < kAcc; ++i) acc[i] = vset(float(i) * 1e-3f);
  const Vec a = vset(0.999999f), b = vset(1e-7f);
  const double t0 = thread_seconds();
  for (long it = 0; it < iters; ++it) {
    for (int i = 0; i < kAcc; ++i) acc[i] = vop(acc[i], a, b);
    asm volatile("" : "+x"(acc[0]), "+x"(acc[5]), "+x"(acc[11]));
  }
  const double t1 = thread_seconds();
  float s = 0;
  for (int i = 0; i < kAcc; ++i) s += vsum(acc[i]);
  *sink = s;
  return t1 - t0;
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
  float sink = 0;
  const long iters = 20'000'000;
  double best = 1e30;
  for (int rep = 0; rep < 7; ++rep) best = std::min(best, run(iters, &sink));
  const double flop = double(iters) * kAcc * kLanes * kFlopPerOp;
  const double gflops = flop / best / 1e9;
  const double step_flop = double(batch) * (10.0 * dim * hidden + 6.0 * dim * out);
  std::printf(
      "fma_floor: %.1f GFLOP/s on one thread, %s (thread CPU time, best of 7, checksum %.3g)\n",
      gflops, kIsa, double(sink));
  std::printf("fma_floor: MLP step D %ld H %ld O %ld B %ld = %.1f MFLOP -> floor %.3f ms\n", dim,
              hidden, out, batch, step_flop / 1e6, step_flop / (gflops * 1e9) * 1e3);
  return 0;
}
