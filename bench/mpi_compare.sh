#!/usr/bin/env bash
# Side by side: OpenMPI's MPI_Allreduce (ranks = processes on shared memory) and dtsim's
# all_reduce (ranks = threads), same N, same sizes, same float32 sum, same timing rule
# (median of trials; a trial is barrier + back-to-back calls, slowest rank), one script run.
#
#   bench/mpi_compare.sh                  # N = 2 4 8, sizes 8 B .. 16 MiB (x2)
#   NS="2" MAX=1M bench/mpi_compare.sh    # a subset
#   ROUNDS=5 NS="2 4 8" MIN=8 MAX=8 bench/mpi_compare.sh   # 5 interleaved rounds, medians
#
# With ROUNDS=R each round runs every N (OpenMPI, then dtsim) and prints its table; a last
# table gives, per N and size, the median over the rounds of each side's time and of the
# per-round ratios. ALGO="rd auto" (any -a of nccl_table, one or more) measures dtsim
# with each, right after OpenMPI in every round (default: auto).
#
# BOUND=1 (the default) also runs bench/all_reduce_bound.cc in every round, after dtsim,
# for all_reduce: the best busbw any all_reduce reaches on this machine (the least memory
# traffic, no synchronisation), and prints per size the bound, dtsim's busbw as a fraction
# of it and 5x OpenMPI's busbw as a fraction of it (above 1: 5x OpenMPI is out of reach).
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
ROUNDS=${ROUNDS:-1}
ALGO=${ALGO:-auto}
BOUND=${BOUND:-1}
# The bound's smallest size: the first of MIN, MIN x FACTOR, ... from 64 KiB on (below, a
# call's time is synchronisation, which the bound leaves out); none if that passes MAX.
to_bytes() { numfmt --from=iec "$1"; }
BOUND_MIN=$(to_bytes "$MIN")
while ((BOUND_MIN < 65536)); do BOUND_MIN=$((BOUND_MIN * FACTOR)); done
((BOUND_MIN > $(to_bytes "$MAX"))) && BOUND=0

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
TARGETS="nccl_table"
[[ $BOUND == 1 ]] && TARGETS="nccl_table all_reduce_bound"
# shellcheck disable=SC2086
cmake --build "$BUILD" --target $TARGETS >&2 ||
  { [[ -x $BUILD/bench/nccl_table ]] && echo "# build failed; using the existing binaries" >&2; }
mkdir -p "$BUILD/bench"
mpicxx -O2 -std=c++17 -Wall -o "$BUILD/bench/mpi_allreduce" "$ROOT/bench/mpi_allreduce.cc"

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
echo "# $(date -u +%FT%TZ) $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# $(mpirun --version 2>/dev/null | head -1)"
echo "# binding: mpirun binds ranks to cores when N <= cores and not when oversubscribed;"
echo "# dtsim's bench harness does the same with WorldOptions::bind_to_cores"
for round in $(seq 1 "$ROUNDS"); do
for n in $NS; do
  # OpenMPI's shared-memory transport as root in a container: mpirun flags from issue 7.
  mpirun --allow-run-as-root --oversubscribe -np "$n" "$BUILD/bench/mpi_allreduce" \
    -b "$MIN" -e "$MAX" -f "$FACTOR" -t "$TRIALS" >"$TMP/mpi.$n"
  cat "$TMP/mpi.$n"
  for algo in $ALGO; do
    "$BUILD/bench/nccl_table" -o all_reduce -n "$n" -b "$MIN" -e "$MAX" -f "$FACTOR" \
      -t "$TRIALS" -a "$algo" >"$TMP/dtsim.$n.$algo"
    cat "$TMP/dtsim.$n.$algo"
  done
  : >"$TMP/bound.$n"
  if [[ $BOUND == 1 ]]; then
    "$BUILD/bench/all_reduce_bound" -n "$n" -b "$BOUND_MIN" -e "$MAX" -f "$FACTOR" \
      -t "$TRIALS" >"$TMP/bound.$n"
    cat "$TMP/bound.$n"
  fi
  for algo in $ALGO; do
    echo "#"
    echo "# all_reduce N=$n, round $round of $ROUNDS: OpenMPI (processes) vs dtsim (threads, -a $algo)"
    echo "# ratio = dtsim/OpenMPI busbw (> 1: dtsim faster); t-ratio = dtsim/OpenMPI time"
    [[ $BOUND == 1 ]] &&
      echo "# bound = all_reduce_bound's busbw; of-bound = dtsim busbw / bound; 5mpi/bound = 5 x OpenMPI busbw / bound"
    printf "# %10s %14s %14s %16s %16s %8s %8s" size "mpi time(us)" "dtsim time(us)" \
      "mpi busbw(GB/s)" "dtsim busbw(GB/s)" ratio t-ratio
    [[ $BOUND == 1 ]] && printf " %12s %9s %10s" "bound(GB/s)" of-bound 5mpi/bound
    printf "\n"
    # Join the data rows on size (column 1); time is column 5, busbw 7, #wrong 8.
    awk -v n="$n" -v algo="$algo" -v rows="$TMP/rows" -v bound="$TMP/bound.$n" '
         BEGIN { while ((getline line < bound) > 0) if (line !~ /^#/) { split(line, f); bb[f[1]] = f[7] } }
         FNR == NR && !/^#/ { t[$1] = $5; b[$1] = $7; next }
         !/^#/ && ($1 in t) {
           r = (b[$1] > 0) ? $7 / b[$1] : 0
           tr = (t[$1] > 0) ? $5 / t[$1] : 0
           printf "  %10s %14s %14s %16s %16s %8.2f %8.2f", $1, t[$1], $5, b[$1], $7, r, tr
           has = ($1 in bb)  # test before bb[$1] is read: reading creates the entry
           x = has ? bb[$1] : 0
           of = (x > 0) ? $7 / x : 0
           need = (x > 0) ? 5 * b[$1] / x : 0
           if (has) printf " %12s %9.2f %10.2f", x, of, need
           printf "%s\n", ($8 != 0 ? "  WRONG" : "")
           print n, algo, $1, t[$1], $5, r, tr, x, of, need >> rows
         }' "$TMP/mpi.$n" "$TMP/dtsim.$n.$algo"
  done
done
done
echo "# $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
if [[ $ROUNDS -gt 1 ]]; then
  echo "#"
  echo "# medians over $ROUNDS rounds (each column its own median; ratios: of per-round ratios)"
  printf "# %4s %6s %10s %14s %14s %8s %8s" N algo size "mpi time(us)" "dtsim time(us)" ratio \
    t-ratio
  [[ $BOUND == 1 ]] && printf " %12s %9s %10s" "bound(GB/s)" of-bound 5mpi/bound
  printf "\n"
  awk -v bound="$BOUND" '
    function med(s,   a, k, i, j, x) {  # median by insertion sort (mawk has no asort)
      k = split(s, a, " ")
      for (i = 2; i <= k; ++i) {
        x = a[i] + 0
        for (j = i - 1; j >= 1 && a[j] + 0 > x; --j) a[j + 1] = a[j]
        a[j + 1] = x
      }
      return a[int((k + 1) / 2)]
    }
    { key = $1 " " $2 " " $3; if (!(key in seen)) { seen[key] = 1; order[++m] = key }
      mt[key] = mt[key] " " $4; dt[key] = dt[key] " " $5; r[key] = r[key] " " $6
      tr[key] = tr[key] " " $7; bb[key] = bb[key] " " $8; of[key] = of[key] " " $9
      nd[key] = nd[key] " " $10 }
    END { for (i = 1; i <= m; ++i) { k = order[i]; split(k, f, " ")
            printf "  %4s %6s %10s %14s %14s %8.2f %8.2f", f[1], f[2], f[3], med(mt[k]),
                   med(dt[k]), med(r[k]), med(tr[k])
            if (bound == 1) printf " %12.3f %9.2f %10.2f", med(bb[k]), med(of[k]), med(nd[k])
            printf "\n" } }' "$TMP/rows"
fi
