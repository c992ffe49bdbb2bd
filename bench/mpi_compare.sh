#!/usr/bin/env bash
# Side by side: OpenMPI's MPI_Allreduce (ranks = processes on shared memory) and dtsim's
# all_reduce (ranks = threads), same N, same sizes, same float32 sum, same timing rule
# (median of trials; a trial is barrier + back-to-back calls, slowest rank), one script run.
#
#   bench/mpi_compare.sh                  # N = 2 4 8, sizes 8 B .. 16 MiB (x2)
#   NS="2" MAX=1M bench/mpi_compare.sh    # a subset
#
# Installs openmpi-bin and libopenmpi-dev with apt-get if mpicxx/mpirun are missing, builds
# bench/mpi_allreduce.cc with mpicxx, and nccl_table with CMake (in $BUILD, default
# build-bench). ratio = dtsim busbw / OpenMPI busbw (> 1: dtsim faster).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build-bench}
NS=${NS:-"2 4 8"}
MIN=${MIN:-8}
MAX=${MAX:-16M}
FACTOR=${FACTOR:-2}
TRIALS=${TRIALS:-5}

if ! command -v mpicxx >/dev/null || ! command -v mpirun >/dev/null; then
  echo "# installing OpenMPI from Debian (openmpi-bin libopenmpi-dev)" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y --no-install-recommends openmpi-bin libopenmpi-dev >&2 ||
    { apt-get update >&2 && apt-get install -y --no-install-recommends openmpi-bin libopenmpi-dev >&2; }
fi

if [[ ! -f $BUILD/build.ninja ]]; then
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >&2
fi
# If the tree is mid-edit (another engineer's folder), fall back on the last good binary.
cmake --build "$BUILD" --target nccl_table >&2 ||
  { [[ -x $BUILD/bench/nccl_table ]] && echo "# build failed; using the existing nccl_table" >&2; }
mkdir -p "$BUILD/bench"
mpicxx -O2 -std=c++17 -Wall -o "$BUILD/bench/mpi_allreduce" "$ROOT/bench/mpi_allreduce.cc"

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
echo "# $(date -u +%FT%TZ) $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# $(mpirun --version 2>/dev/null | head -1)"
echo "# binding: mpirun binds ranks to cores when N <= cores and not when oversubscribed;"
echo "# dtsim's bench harness does the same with WorldOptions::bind_to_cores"
for n in $NS; do
  # OpenMPI's shared-memory transport as root in a container: mpirun flags from issue 7.
  mpirun --allow-run-as-root --oversubscribe -np "$n" "$BUILD/bench/mpi_allreduce" \
    -b "$MIN" -e "$MAX" -f "$FACTOR" -t "$TRIALS" >"$TMP/mpi.$n"
  "$BUILD/bench/nccl_table" -o all_reduce -n "$n" -b "$MIN" -e "$MAX" -f "$FACTOR" \
    -t "$TRIALS" >"$TMP/dtsim.$n"
  cat "$TMP/mpi.$n" "$TMP/dtsim.$n"
  echo "#"
  echo "# all_reduce N=$n: OpenMPI (processes) vs dtsim (threads); ratio = dtsim/OpenMPI busbw"
  printf "# %10s %14s %14s %16s %16s %8s\n" size "mpi time(us)" "dtsim time(us)" \
    "mpi busbw(GB/s)" "dtsim busbw(GB/s)" ratio
  # Join the data rows on size (column 1); time is column 5, busbw column 7, #wrong column 8.
  awk 'FNR == NR && !/^#/ { t[$1] = $5; b[$1] = $7; next }
       !/^#/ && ($1 in t) {
         r = (b[$1] > 0) ? $7 / b[$1] : 0
         printf "  %10s %14s %14s %16s %16s %8.2f%s\n", $1, t[$1], $5, b[$1], $7, r,
                ($8 != 0 ? "  WRONG" : "")
       }' "$TMP/mpi.$n" "$TMP/dtsim.$n"
done
