#!/bin/bash
# Bad input under mpirun: every process meets it before any work and exits 2, the job
# prints the one-line error once (process 0's, or the lowest-numbered process's that met one,
# named, when only some do: MPMD cases below), no process is stopped by SIGTERM for it, and
# no file is made or replaced.
#   tests/mpi/usage_test.sh MPIEXEC DTSIM [mpiexec flags...]
set -u
mpiexec=$1 dtsim=$(realpath "$2")
shift 2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir" || exit 1
echo "not dtsim's" >notes.txt
fails=0
# case: processes, expected error text, dtsim arguments
check() {
  local np=$1 want=$2
  shift 2
  local out rc lines
  out=$(timeout 120 "$mpiexec" "$@" 2>&1)
  rc=$?
  lines=$(grep -c '^dtsim' <<<"$out")
  if [ "$rc" -ne 2 ] || [ "$lines" -ne 1 ] || ! grep -qF -- "$want" <<<"$out" ||
    grep -q 'stopped by' <<<"$out" || [ "$(ls)" != notes.txt ] ||
    [ "$(cat notes.txt)" != "not dtsim's" ]; then
    echo "FAIL: -np $np ${*: -4}: exit $rc (want 2), $lines dtsim lines (want 1), files $(ls | tr '\n' ' ')"
    echo "$out"
    fails=$((fails + 1))
  else
    echo "ok: -np $np: $(grep '^dtsim' <<<"$out")"
  fi
}
run() {  # run NP WANT ARGS...: dtsim ARGS under mpiexec -np NP
  local np=$1 want=$2
  shift 2
  check "$np" "$want" "${flags[@]}" -np "$np" "$dtsim" "$@"
}
flags=("$@")
run 4 "unknown flag --stratgy" train --stratgy x
run 4 "--batch 30 is not divisible" train --batch 30
run 2 "--calibrate under mpirun measures the links and ddp steps, not compute" estimate --calibrate cal.json
run 4 "--report notes.txt exists and is not a file dtsim wrote" train --report notes.txt --steps 2
run 2 "--trace nowhere/t.json: folder nowhere does not exist" train --trace nowhere/t.json
run 4 "--algo mpi has no bfloat16" train --algo mpi --precision bf16
run 4 "--algo mpi runs MPI's collectives on the world communicator only" \
  train --strategy dp-tp --algo mpi
run 4 "--algo mpi runs MPI's collectives on the world communicator only, and this mesh (dp 4 x tp 1 x pp 1, ep 2)" \
  train --model moe --dp 4 --ep 2 --algo mpi
run 2 "--strategy accum trains in one process; run it without mpirun" train --strategy accum
run 3 "its runs take 4 ranks (the 3D row 8), which 3 MPI processes do not divide" demo
run 2 "--report notes.txt exists" stress --report notes.txt
run 3 "dtsim stress: 3 MPI processes x 256 rank threads = 768 ranks is more than a world holds (512)" \
  stress --threads-per-process 256
# Errors that only some processes meet (as a folder that exists on one host only), in
# mpirun's MPMD form: the processes agree at the start (runtime/job_start.h).
mpmd() {  # mpmd NP WANT "ARGS OF PROCESS 0" "ARGS OF PROCESS 1" ...: one process each
  local np=$1 want=$2 line words args=()
  shift 2
  for line in "$@"; do
    [ ${#args[@]} -eq 0 ] || args+=(:)
    read -ra words <<<"$line"
    args+=(-np 1 "$dtsim" "${words[@]}")
  done
  check "$np" "$want" "${flags[@]}" "${args[@]}"
}
mpmd 2 "dtsim train: process 1: --trace nowhere/t.json: folder nowhere does not exist" \
  "train --steps 2" "train --steps 2 --trace nowhere/t.json"
mpmd 2 "dtsim train: --trace nowhere/t.json: folder nowhere does not exist" \
  "train --steps 2 --trace nowhere/t.json" "train --steps 2"
mpmd 3 "dtsim train: processes 1, 2: --trace nowhere/t.json: folder nowhere does not exist" \
  "train --batch 30" "train --batch 30 --trace nowhere/t.json" \
  "train --batch 30 --trace nowhere/t.json"
mpmd 3 "dtsim train: process 1 (process 2 met another error): --trace nowhere/t.json: folder" \
  "train --batch 30" "train --batch 30 --trace nowhere/t.json" \
  "train --batch 30 --report notes.txt"
mpmd 2 "dtsim: process 1: unknown command 'trian'" "train --steps 2" "trian --steps 2"
# Processes that disagree on the command (issue 37, defects 1 and 3): the world's shape, the
# run's settings, an output given to one process only. Every process compares the flags at the
# start, before any work: exit 2 naming the flag and both values (was: a segfault, or exit 0
# with replicas that disagree and a report silently not written).
mpmd 2 "dtsim train: processes disagree on --threads-per-process: process 1 has '--threads-per-process 1', process 0 has '--threads-per-process 2'" \
  "train --threads-per-process 2 --quiet" "train --threads-per-process 1 --quiet"
mpmd 2 "dtsim train: processes disagree on --seed: process 1 has '--seed 2', process 0 has '--seed 1'" \
  "train --seed 1 --steps 2" "train --seed 2 --steps 2"
mpmd 2 "dtsim train: processes disagree on --lr" "train --lr 0.1 --steps 2" "train --steps 2"
mpmd 2 "dtsim train: processes disagree on --report: process 1 has '--report (not given)'" \
  "train --steps 2 --report r.json" "train --steps 2"
mpmd 3 "dtsim train: processes disagree on --check: process 2 has" \
  "train --steps 2 --batch 30" "train --steps 2 --batch 30" "train --steps 2 --batch 30 --check"
mpmd 2 "dtsim stress: processes disagree on --seed" "stress --seed 1" "stress --seed 2"
[ "$fails" -eq 0 ] || exit 1
