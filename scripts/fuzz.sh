#!/usr/bin/env bash
# Issue 37: one command for a 10^5-collective fuzz of the runtime over every world: free
# threads with jitter (8 and 3 ranks), the PCT scheduler (4 ranks, depth 3), MPI (4
# processes) and hybrid (2 processes x 2 threads), each collective checked against the
# single-threaded reference by `dtsim stress`. Every leg runs under a deadline; one that
# outlives it is a hang. Prints one line per leg and the totals; exit 0 only with at least
# 100000 collectives, 0 wrong and 0 hangs.
#   scripts/fuzz.sh [build/dtsim]          (env: SCALE=1 divides every leg's length)
set -u
DTSIM=$(realpath "${1:-build/dtsim}")
SCALE=${SCALE:-1}
MPI=(mpiexec --allow-run-as-root --oversubscribe)
[ -x "$DTSIM" ] || { echo "fuzz.sh: $DTSIM is not an executable; build it (cmake --build build --target dtsim)" >&2; exit 2; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK" || exit 1
total=0 wrong=0 hangs=0 errors=0
leg() {  # name, deadline in seconds, command...
  local name=$1 limit=$2
  shift 2
  local start=$SECONDS
  timeout --kill-after=10 "$limit" "$@" > out.txt 2>&1
  local rc=$?
  local checked failures
  checked=$(sed -n 's/^collectives checked: \([0-9]*\).*/\1/p' out.txt | awk '{s += $1} END {print s + 0}')
  failures=$(sed -n 's/^failures: \([0-9]*\).*/\1/p' out.txt | awk '{s += $1} END {print s + 0}')
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    hangs=$((hangs + 1))
    echo "$name: HANG (no result after ${limit} s)"
  elif [ "$rc" -ne 0 ] && [ "$failures" -eq 0 ]; then
    errors=$((errors + 1))
    echo "$name: exit $rc without a counted failure:"; tail -5 out.txt
  fi
  total=$((total + checked))
  wrong=$((wrong + failures))
  echo "$name: $checked collectives, $failures wrong, exit $rc, $((SECONDS - start)) s"
}
n() { echo $(($1 / SCALE > 0 ? $1 / SCALE : 1)); }
leg "threads 8 ranks, jitter" 900 "$DTSIM" stress --ranks 8 --iterations "$(n 1500)" --seed 11 \
  --jitter-us 50 --keep-going
leg "threads 3 ranks, jitter" 900 "$DTSIM" stress --ranks 3 --iterations "$(n 1000)" --seed 12 \
  --jitter-us 50 --keep-going
leg "pct depth 3, 4 ranks" 900 "$DTSIM" stress --scheduler pct --depth 3 --ranks 4 \
  --schedules "$(n 1800)" --seed 13 --keep-going
leg "mpi 4 processes" 900 "${MPI[@]}" -np 4 "$DTSIM" stress --ranks 4 --iterations "$(n 900)" \
  --seed 14 --keep-going
leg "hybrid 2 x 2" 900 "${MPI[@]}" -np 2 "$DTSIM" stress --threads-per-process 2 --ranks 4 \
  --iterations "$(n 900)" --seed 15 --keep-going
echo "total: $total collectives, $wrong wrong, $hangs hangs, $errors other errors"
[ "$SCALE" -ne 1 ] || [ "$total" -ge 100000 ] || { echo "fewer than 100000 collectives"; exit 1; }
[ "$wrong" -eq 0 ] && [ "$hangs" -eq 0 ] && [ "$errors" -eq 0 ]
