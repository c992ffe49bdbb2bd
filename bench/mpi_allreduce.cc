// mpi_allreduce: OpenMPI's MPI_Allreduce measured the way bench/nccl_table measures dtsim,
// for bench/mpi_compare.sh. Built by that script with mpicxx (not by CMake).
//
//   mpirun --allow-run-as-root --oversubscribe -np 2 mpi_allreduce -b 8 -e 16M -f 2 [-t 5]
//
// For each size (float32 sum): verify once (#wrong), calibrate calls per trial to about
// --trial-ms on rank 0 and broadcast the count, then per trial MPI_Barrier and time the
// calls; a trial's time is the slowest rank's. Prints the nccl-tests layout with the
// median trial; busbw = algbw * 2(N-1)/N.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

size_t parse_bytes(const char* s) {
  char* end = nullptr;
  size_t v = std::strtoull(s, &end, 10);
  if (*end == 'K') v <<= 10;
  if (*end == 'M') v <<= 20;
  if (*end == 'G') v <<= 30;
  return v;
}

// Seconds per call of `iters` back-to-back all-reduces, slowest rank.
double time_calls(std::vector<float>& buf, long iters) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  for (long i = 0; i < iters; ++i) {
    MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(buf.size()), MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
  }
  double local = (MPI_Wtime() - t0) / static_cast<double>(iters), slowest = 0;
  MPI_Allreduce(&local, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  size_t min_bytes = 8, max_bytes = size_t{16} << 20, factor = 2;
  int trials = 5;
  double trial_ms = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "-b") min_bytes = parse_bytes(argv[i + 1]);
    if (a == "-e") max_bytes = parse_bytes(argv[i + 1]);
    if (a == "-f") factor = parse_bytes(argv[i + 1]);
    if (a == "-t") trials = std::atoi(argv[i + 1]);
    if (a == "--trial-ms") trial_ms = std::atof(argv[i + 1]);
  }
  if (rank == 0) {
    std::printf(
        "#\n# OpenMPI MPI_Allreduce: %d ranks (processes), float32, median of %d trials\n#\n", n,
        trials);
    std::printf("# %10s %12s %8s %6s %11s %12s %12s %7s\n", "size", "count", "type", "redop",
                "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
  }
  for (size_t b = min_bytes; b <= max_bytes; b *= factor) {
    const size_t count = std::max<size_t>(b / sizeof(float), 1);
    std::vector<float> buf(count);
    // Verify: rank r contributes (r + 1) + (i mod 7); the sum is exact in float32.
    for (size_t i = 0; i < count; ++i) buf[i] = float(rank + 1) + float(i % 7);
    MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
    long wrong = 0, total_wrong = 0;
    for (size_t i = 0; i < count; ++i)
      wrong += buf[i] != float(n * (n + 1) / 2) + float(n) * float(i % 7);
    MPI_Reduce(&wrong, &total_wrong, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    std::fill(buf.begin(), buf.end(), 0.0f);
    // Calibrate: grow the call count until a trial takes an eighth of the target.
    long iters = 1;
    for (;;) {
      const double s = time_calls(buf, iters) * double(iters);
      if (s >= trial_ms / 8e3 || iters >= (1 << 20)) {
        iters = std::max(1L, static_cast<long>(trial_ms / 1e3 / (s / double(iters))));
        break;
      }
      iters *= 8;
    }
    MPI_Bcast(&iters, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    std::vector<double> per;
    for (int t = 0; t < trials; ++t) per.push_back(time_calls(buf, iters));
    std::sort(per.begin(), per.end());
    const double s =
        per.size() % 2 ? per[per.size() / 2] : (per[per.size() / 2 - 1] + per[per.size() / 2]) / 2;
    if (rank == 0) {
      const double bytes = double(count * sizeof(float));
      const double algbw = bytes / s / 1e9;
      std::printf("  %10zu %12zu %8s %6s %11.2f %12.3f %12.3f %7ld\n", count * sizeof(float), count,
                  "float", "sum", s * 1e6, algbw, algbw * 2.0 * (n - 1) / n, total_wrong);
      std::fflush(stdout);
    }
  }
  MPI_Finalize();
  return 0;
}
