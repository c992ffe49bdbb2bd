// The GEMM's register tile alone (model/gemm_avx2_tile.h's micro_tile_pair, or micro_tile
// without AVX-512): its fp32 FLOP/s on one thread with the broadcast operand P in L1 and
// with P a weight-sized array streamed through the caches, the vector operand Q one packed
// pair of panels (in L1) and an epilogue that stores into a small buffer. Beside
// fma_floor's rate it tells how much of a GEMM's shortfall in the step is the tile itself:
//
//   taskset -c 0 build/bench/tile_rate; taskset -c 0 build/bench/fma_floor
//
// Cases (K = 256, the step's D): P of 12 rows (12 KiB, in L1); P of 1020 rows (1 MiB, as
// W1 in the forward), read row tile by row tile, without and with the transposed
// product's prefetch of the next tile's rows.
#include <algorithm>
#include <cstdio>
#include <vector>

#include "bench/step_clock.h"
#include "model/gemm_avx2_tile.h"

#if DTSIM_GEMM_AVX2
namespace {

using namespace dtsim::model::avx2;

// Best GFLOP/s of 7 runs of `reps` passes over P's row tiles.
double rate(int k, int p_rows, int reps, bool prefetch) {
  std::vector<float> p(size_t(p_rows) * k, 1e-3f), q(2 * panel_stride(k) + kNr, 1e-3f);
  alignas(64) static float sink[kMr * 2 * kNr];
  const Operands o{p.data(), k, 1, q.data(), panel_stride(k), k};
  const int width = kPairs ? 2 * kNr : kNr;
  auto out = [](int row, int col, __m256 lo, __m256 hi) {
    float* dst = sink + (row % kMr) * 2 * kNr + col % (2 * kNr);
    _mm256_store_ps(dst, lo);
    _mm256_store_ps(dst + 8, hi);
  };
  double best = 1e30;
  for (int run = 0; run < 7; ++run) {
    const double t0 = dtsim::bench::seconds(CLOCK_THREAD_CPUTIME_ID);
    for (int r = 0; r < reps; ++r) {
      for (int r0 = 0; r0 + kMr <= p_rows; r0 += kMr) {
        if (prefetch) prefetch_tile_rows(o, r0 + kMr, std::min(kMr, p_rows - r0 - kMr));
        if constexpr (kPairs) {
          micro_tile_pair<true>(o, r0, kMr, 0, out);
        } else {
          micro_tile<true>(o, r0, kMr, 0, out);
        }
      }
    }
    best = std::min(best, dtsim::bench::seconds(CLOCK_THREAD_CPUTIME_ID) - t0);
  }
  return 2.0 * k * width * (p_rows / kMr * kMr) * double(reps) / best / 1e9;
}

}  // namespace

int main() {
  const char* tile = kPairs ? "6 x 32 (AVX-512)" : "6 x 16 (AVX2)";
  std::printf("tile_rate: %s tile, K 256, P in L1 (12 rows):              %6.1f GFLOP/s\n", tile,
              rate(256, 12, 4000, false));
  std::printf("tile_rate: %s tile, K 256, P 1 MiB streamed:               %6.1f GFLOP/s\n", tile,
              rate(256, 1020, 50, false));
  std::printf("tile_rate: %s tile, K 256, P 1 MiB, next rows prefetched:  %6.1f GFLOP/s\n", tile,
              rate(256, 1020, 50, true));
}
#else
int main() {
  std::puts("tile_rate: this build has no AVX2/FMA GEMM (DTSIM_OWN_GEMM off or no AVX2)");
}
#endif
