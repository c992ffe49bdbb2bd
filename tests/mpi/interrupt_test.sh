#!/bin/bash
# Ctrl-C (SIGINT) of mpirun during training with --report and --trace: the job ends within
# a few seconds, non-zero, and leaves no file behind, neither the outputs nor a
# temporary (mpirun turns the SIGINT into SIGTERM of every process). Where the signal
# finds rank 0 (inside a collective, or computing between two) takes different paths, so
# the test interrupts several runs.
#   tests/mpi/interrupt_test.sh MPIEXEC DTSIM [mpiexec flags...]
set -u
. "$(dirname "$0")/job_end.sh"
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
  # Wait until training runs: process 0 printed the run's header (the outputs' temporary
  # files exist only while they are written, at the end).
  for _ in $(seq 200); do
    grep -q '^dtsim train: ' "$log" && break
    kill -0 "$launcher" 2>/dev/null || break
    sleep 0.1
  done
  grep -q '^dtsim train: ' "$log" ||
    { echo "FAIL: training did not start"; cat "$log"; kill -9 "$launcher" 2>/dev/null; exit 1; }
  sleep 0.5
  kill -INT "$launcher"
  wait_job_end "$launcher" 15 SIGINT
  tail -3 "$log"
  echo "exit code $rc; files left: $(ls -A)"
  [ "$rc" -ne 0 ] || { echo "FAIL: exit code 0 after SIGINT"; exit 1; }
  [ -z "$(ls -A)" ] || { echo "FAIL: files left behind"; exit 1; }
done
echo "PASS"
