#!/bin/bash
# Ctrl-C (SIGINT) of mpirun during training with --report and --trace: the job ends within
# a few seconds, non-zero, and leaves no file behind, neither the outputs nor their
# temporaries (mpirun turns the SIGINT into SIGTERM of every process). Where the signal
# finds rank 0 (inside a collective, or computing between two) takes different paths, so
# the test interrupts several runs.
#   tests/mpi/interrupt_test.sh MPIEXEC DTSIM [mpiexec flags...]
set -u
mpiexec=$1 dtsim=$(realpath "$2")
shift 2
dir=$(mktemp -d)
log=$(mktemp)
trap 'rm -rf "$dir" "$log"' EXIT
cd "$dir" || exit 1
for round in 1 2 3 4 5 6; do
  echo "round $round"
  "$mpiexec" "$@" -np 4 "$dtsim" train --steps 100000 --report out.json --trace trace.json \
    >"$log" 2>&1 &
  launcher=$!
  # Wait until training runs: both temporaries exist.
  for _ in $(seq 200); do
    [ "$(find . -name 'out.json.*' -o -name 'trace.json.*' | wc -l)" -eq 2 ] && break
    kill -0 "$launcher" 2>/dev/null || break
    sleep 0.1
  done
  [ "$(find . -name 'out.json.*' -o -name 'trace.json.*' | wc -l)" -eq 2 ] ||
    { echo "FAIL: training did not start"; cat "$log"; kill -9 "$launcher" 2>/dev/null; exit 1; }
  sleep 0.5
  kill -INT "$launcher"
  for _ in $(seq 150); do
    kill -0 "$launcher" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$launcher" 2>/dev/null; then
    echo "FAIL: the job still runs 15 s after SIGINT"
    kill -9 "$launcher"; pkill -9 -P "$launcher"
    exit 1
  fi
  wait "$launcher"
  rc=$?
  tail -3 "$log"
  echo "exit code $rc; files left: $(ls -A)"
  [ "$rc" -ne 0 ] || { echo "FAIL: exit code 0 after SIGINT"; exit 1; }
  [ -z "$(ls -A)" ] || { echo "FAIL: files left behind"; exit 1; }
done
echo "PASS"
