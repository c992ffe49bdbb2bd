#!/usr/bin/env bash
# Why dtsim's MPI transport asks for MPI_THREAD_FUNNELED: OpenMPI's 8-byte message rate
# between two processes with one thread per process making every MPI call, against T
# threads per process calling MPI at once under MPI_THREAD_MULTIPLE, T = 1, 2, 4, rounds
# interleaved, medians (bench/mpi_thread_level.cc says what one measurement is).
#
#   bench/mpi_thread_level.sh [ROUNDS]      # default 3
#
# Prints a markdown table: messages per second (millions) for
#   funneled/one   FUNNELED, one thread drives all T streams (dtsim's progress thread)
#   multiple/one   MULTIPLE requested, still one caller (the cost of the level alone)
#   multiple/each  MULTIPLE, T threads each drive one stream (rank threads calling MPI)
# and each column's ratio to funneled/one.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build-bench}
ROUNDS=${1:-3}
command -v mpicxx >/dev/null ||
  { echo "mpi_thread_level.sh: mpicxx not found; install openmpi-bin libopenmpi-dev" >&2; exit 2; }
mkdir -p "$BUILD/bench"
bin=$BUILD/bench/mpi_thread_level
mpicxx -O2 -std=c++17 -Wall -pthread -o "$bin" "$ROOT/bench/mpi_thread_level.cc"
run=(mpirun -np 2)
[ "$(id -u)" -eq 0 ] && run+=(--allow-run-as-root --oversubscribe)

TMP=$(mktemp)
trap 'rm -f "$TMP"' EXIT
echo "# $(date -u +%FT%TZ) $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# $(mpirun --version 2>/dev/null | head -1); bench/mpi_thread_level.sh $ROUNDS"
for _ in $(seq "$ROUNDS"); do
  for t in 1 2 4; do
    for mode in "funneled one" "multiple one" "multiple each"; do
      set -- $mode
      "${run[@]}" "$bin" --level "$1" --callers "$2" --streams "$t" >>"$TMP"
    done
  done
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$TMP" <<'PY'
import statistics, sys
rates = {}
for line in open(sys.argv[1]):
    level, callers, streams, rate = line.split()
    rates.setdefault((int(streams), f"{level}/{callers}"), []).append(float(rate))
cols = ["funneled/one", "multiple/one", "multiple/each"]
print("| streams T | " + " | ".join(c + " (M msg/s)" for c in cols) +
      " | multiple/one vs funneled | multiple/each vs funneled |")
print("|---|" + "---|" * (len(cols) + 2))
for t in sorted({k[0] for k in rates}):
    med = {c: statistics.median(rates[(t, c)]) for c in cols}
    cells = [f"{med[c] / 1e6:.2f}" for c in cols]
    cells += [f"{med['multiple/one'] / med['funneled/one']:.2f}",
              f"{med['multiple/each'] / med['funneled/one']:.2f}"]
    print(f"| {t} | " + " | ".join(cells) + " |")
PY
